//! What both listeners use to hold connections, knowing neither protocol's messages: limits
//! on connections and idle time ([`conn_limits`]), the per-shard budget for request bytes
//! ([`request_memory`]) and the worker that sends file ranges with sendfile ([`sendfile`]).

pub mod conn_limits;
pub mod request_memory;
pub mod sendfile;
