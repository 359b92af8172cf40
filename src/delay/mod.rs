//! Delayed messages (issue 19, second half): a message produced with a delay becomes visible
//! in its partition at its due time, appended then. This module holds the sans-IO parts; the
//! durable per-shard delay log and the shard task that drives them are not built yet.
//!
//! - [`wheel`]: the hierarchical timing wheel that orders pending messages by due time.
//! - [`store`]: the shard's durable pending messages and fired marks.

pub mod store;
pub mod wheel;
