//! Delayed messages (issue 19, second half): a message produced with a delay becomes visible
//! in its partition at its due time, appended then (its offset assigned then).
//!
//! - [`wheel`]: the hierarchical timing wheel that orders pending messages by due time.
//! - [`store`]: the shard's durable pending messages and fired marks, and which of them are
//!   in memory (the near-term ones, within `--delay-memory-bytes`).
//! - [`index`]: the small per-message records the store pages messages in from.
//! - [`queue`]: accepting a message and the shard task that fires due ones, exactly once.

pub mod index;
pub mod queue;
pub mod store;
pub mod wheel;
