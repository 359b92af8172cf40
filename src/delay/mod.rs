//! Delayed messages (issue 19, second half): a message produced with a delay becomes visible
//! in its partition at its due time, appended then (its offset assigned then).
//!
//! - [`wheel`]: the hierarchical timing wheel that orders pending messages by due time.
//! - [`store`]: the shard's durable pending messages and fired marks.
//! - [`queue`]: accepting a message and the shard task that fires due ones, exactly once.

pub mod queue;
pub mod store;
pub mod wheel;
