//! What both listeners use to hold connections, knowing neither protocol's messages: limits
//! on connections and idle time ([`conn_limits`]), the per-shard budget for request bytes
//! ([`request_memory`]), the worker that sends file ranges with sendfile ([`sendfile`]), and
//! for pipelined connections the in-order reply queue ([`in_order`]) and the socket its
//! reader and writer share ([`shared_stream`]), plain or TLS ([`tls_stream`]: rustls fed
//! on the shard that owns the connection).

pub mod conn_limits;
pub mod in_order;
pub mod request_memory;
pub mod sendfile;
pub mod shared_stream;
pub mod tls_stream;
