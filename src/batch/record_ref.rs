//! Borrowed views of records that archive to exactly the types of [`super::record`] (format
//! version 3/4 body): the builder archives these straight from its byte buffer instead of
//! first copying each record into owned `Vec`s and `String`s.
//!
//! Each wrapper archives through the same rkyv routine its owned counterpart uses
//! (`ArchivedVec::serialize_from_slice`, `ArchivedString::serialize_from_str`), and the
//! structs archive as the owned types' archived types, serializing fields in the same order, so serializer calls, and therefore bytes, are the same as archiving
//! [`super::RecordBody`]. `builder::tests::same_bytes_as_owned_records` checks it.

use rkyv::munge::munge;
use rkyv::rancor::{Fallible, Source};
use rkyv::ser::{Allocator, Writer};
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::{Archive, Place, Serialize};

use super::record::{ArchivedHeader, ArchivedRecord, ArchivedRecordBody};

/// Archives as `Vec<u8>` does.
#[derive(Debug, Clone, Copy)]
pub struct BytesRef<'a>(pub &'a [u8]);

impl Archive for BytesRef<'_> {
    type Archived = ArchivedVec<u8>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_slice(self.0, resolver, out);
    }
}

impl<S: Fallible + Allocator + Writer + ?Sized> Serialize<S> for BytesRef<'_> {
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        ArchivedVec::<u8>::serialize_from_slice(self.0, serializer)
    }
}

/// Archives as `String` does (short strings inline).
#[derive(Debug, Clone, Copy)]
pub struct StrRef<'a>(pub &'a str);

impl Archive for StrRef<'_> {
    type Archived = ArchivedString;
    type Resolver = StringResolver;

    fn resolve(&self, resolver: StringResolver, out: Place<Self::Archived>) {
        ArchivedString::resolve_from_str(self.0, resolver, out);
    }
}

impl<S: Fallible + Writer + ?Sized> Serialize<S> for StrRef<'_>
where
    S::Error: Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<StringResolver, S::Error> {
        ArchivedString::serialize_from_str(self.0, serializer)
    }
}

/// Archives as `Vec<T>` does, for a slice of `T`.
#[derive(Debug, Clone, Copy)]
pub struct SliceRef<'a, T>(pub &'a [T]);

impl<T: Archive> Archive for SliceRef<'_, T> {
    type Archived = ArchivedVec<T::Archived>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_slice(self.0, resolver, out);
    }
}

impl<T, S> Serialize<S> for SliceRef<'_, T>
where
    T: Serialize<S>,
    S: Fallible + Allocator + Writer + ?Sized,
{
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        ArchivedVec::<T::Archived>::serialize_from_slice(self.0, serializer)
    }
}

/// A [`super::Header`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct HeaderRef<'a> {
    pub key: StrRef<'a>,
    pub value: Option<BytesRef<'a>>,
}

impl Archive for HeaderRef<'_> {
    type Archived = ArchivedHeader;
    type Resolver = (StringResolver, Option<VecResolver>);

    fn resolve(&self, (k, v): Self::Resolver, out: Place<ArchivedHeader>) {
        munge!(let ArchivedHeader { key, value } = out);
        self.key.resolve(k, key);
        self.value.resolve(v, value);
    }
}

impl<S: Fallible + Allocator + Writer + ?Sized> Serialize<S> for HeaderRef<'_>
where
    S::Error: Source,
{
    // Fields in declaration order, as the derive on `Header` serializes them.
    fn serialize(&self, s: &mut S) -> Result<Self::Resolver, S::Error> {
        Ok((self.key.serialize(s)?, self.value.serialize(s)?))
    }
}

/// A [`super::Record`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub timestamp_delta: i64,
    pub key: Option<BytesRef<'a>>,
    pub value: Option<BytesRef<'a>>,
    pub headers: SliceRef<'a, HeaderRef<'a>>,
    pub tags: SliceRef<'a, StrRef<'a>>,
}

/// The resolvers of a [`RecordRef`]'s out-of-line fields.
pub struct RecordRefResolver {
    key: Option<VecResolver>,
    value: Option<VecResolver>,
    headers: VecResolver,
    tags: VecResolver,
}

impl Archive for RecordRef<'_> {
    type Archived = ArchivedRecord;
    type Resolver = RecordRefResolver;

    fn resolve(&self, r: RecordRefResolver, out: Place<ArchivedRecord>) {
        munge!(let ArchivedRecord { timestamp_delta, key, value, headers, tags } = out);
        self.timestamp_delta.resolve((), timestamp_delta);
        self.key.resolve(r.key, key);
        self.value.resolve(r.value, value);
        self.headers.resolve(r.headers, headers);
        self.tags.resolve(r.tags, tags);
    }
}

impl<S: Fallible + Allocator + Writer + ?Sized> Serialize<S> for RecordRef<'_>
where
    S::Error: Source,
{
    // Fields in declaration order, as the derive on `Record` serializes them.
    fn serialize(&self, s: &mut S) -> Result<RecordRefResolver, S::Error> {
        Ok(RecordRefResolver {
            key: self.key.serialize(s)?,
            value: self.value.serialize(s)?,
            headers: self.headers.serialize(s)?,
            tags: self.tags.serialize(s)?,
        })
    }
}

/// A [`super::RecordBody`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct BodyRef<'a> {
    pub records: SliceRef<'a, RecordRef<'a>>,
}

impl Archive for BodyRef<'_> {
    type Archived = ArchivedRecordBody;
    type Resolver = VecResolver;

    fn resolve(&self, r: VecResolver, out: Place<ArchivedRecordBody>) {
        munge!(let ArchivedRecordBody { records } = out);
        self.records.resolve(r, records);
    }
}

impl<S: Fallible + Allocator + Writer + ?Sized> Serialize<S> for BodyRef<'_>
where
    S::Error: Source,
{
    fn serialize(&self, s: &mut S) -> Result<VecResolver, S::Error> {
        self.records.serialize(s)
    }
}
