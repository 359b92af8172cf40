//! What the builder archives with: borrowed views that resolve to exactly the archived types
//! of [`super::record`] (format version 3/4 body), and placeholders for parts already written.
//!
//! The builder writes each record's byte strings and its header and tag arrays into the
//! output buffer when the record is pushed, in the order and at the positions archiving
//! [`super::RecordBody`] puts them (rkyv writes a struct's out-of-line data field by field,
//! then the struct; a non-copy slice's elements' data, then the aligned array). At build time
//! only the record array and the root are left, and they point at what is already there
//! ([`Written`]). `builder::tests` check the bytes against archiving owned records.

use std::marker::PhantomData;

use rkyv::munge::munge;
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::{Archive, Place, Portable};

use super::record::{ArchivedHeader, ArchivedRecord, ArchivedRecordBody};

/// Resolves as `Vec<u8>` does.
#[derive(Debug, Clone, Copy)]
pub struct BytesRef<'a>(pub &'a [u8]);

impl Archive for BytesRef<'_> {
    type Archived = ArchivedVec<u8>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_slice(self.0, resolver, out);
    }
}

/// Resolves as `String` does (short strings inline).
#[derive(Debug, Clone, Copy)]
pub struct StrRef<'a>(pub &'a str);

impl Archive for StrRef<'_> {
    type Archived = ArchivedString;
    type Resolver = StringResolver;

    fn resolve(&self, resolver: StringResolver, out: Place<Self::Archived>) {
        ArchivedString::resolve_from_str(self.0, resolver, out);
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

/// `len` elements (bytes, headers, strings, records) already written at `pos` in the output:
/// resolves as a `Vec` of them pointing there.
#[derive(Debug)]
pub struct Written<T> {
    pub pos: usize,
    pub len: usize,
    elements: PhantomData<fn() -> T>,
}

impl<T> Written<T> {
    pub fn new(pos: usize, len: usize) -> Self {
        Written {
            pos,
            len,
            elements: PhantomData,
        }
    }
}

// By hand: a derive would require `T: Clone`/`Copy`, which the archived types are not.
impl<T> Clone for Written<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Written<T> {}

impl<T: Portable> Archive for Written<T> {
    type Archived = ArchivedVec<T>;
    type Resolver = ();

    fn resolve(&self, (): (), out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(self.len, VecResolver::from_pos(self.pos), out);
    }
}

/// A [`super::Record`] whose key, value, headers and tags are already written.
#[derive(Debug, Clone, Copy)]
pub struct WrittenRecord {
    pub timestamp_delta: i64,
    pub key: Option<Written<u8>>,
    pub value: Option<Written<u8>>,
    pub headers: Written<ArchivedHeader>,
    pub tags: Written<ArchivedString>,
}

impl Archive for WrittenRecord {
    type Archived = ArchivedRecord;
    type Resolver = ();

    fn resolve(&self, (): (), out: Place<ArchivedRecord>) {
        munge!(let ArchivedRecord { timestamp_delta, key, value, headers, tags } = out);
        self.timestamp_delta.resolve((), timestamp_delta);
        self.key.resolve(self.key.map(|_| ()), key);
        self.value.resolve(self.value.map(|_| ()), value);
        self.headers.resolve((), headers);
        self.tags.resolve((), tags);
    }
}

/// A [`super::RecordBody`] whose record array is already written.
#[derive(Debug, Clone, Copy)]
pub struct WrittenBody {
    pub records: Written<ArchivedRecord>,
}

impl Archive for WrittenBody {
    type Archived = ArchivedRecordBody;
    type Resolver = ();

    fn resolve(&self, (): (), out: Place<ArchivedRecordBody>) {
        munge!(let ArchivedRecordBody { records } = out);
        self.records.resolve((), records);
    }
}
