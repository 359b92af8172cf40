//! A blocking connection to one shard: send a request, read its response.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use super::error::ClientError;
use super::socket::Socket;
use crate::protocol::frame::{
    encode_meta, encode_request, read_frame_blocking, RequestHeader, ResponseFrame,
};
use crate::protocol::messages::ErrorBody;
use crate::protocol::ApiKey;

/// Parses a response frame and turns a frame-level error or a correlation mismatch into a
/// [`ClientError`]; shared by both connection kinds.
pub fn parse_response(
    addr: SocketAddr,
    buf: crate::protocol::frame::FrameBuf,
    correlation_id: u32,
) -> Result<ResponseFrame, ClientError> {
    let frame = ResponseFrame::parse(buf).map_err(|source| ClientError::Frame {
        addr: addr.to_string(),
        source,
    })?;
    if frame.error != crate::protocol::ErrorCode::None {
        let message = frame
            .decode_meta::<ErrorBody>()
            .map(|b| b.message)
            .unwrap_or_default();
        return Err(ClientError::broker(frame.error, message));
    }
    if frame.correlation_id != correlation_id {
        return Err(ClientError::Invalid(format!(
            "response correlation id {} does not match request {correlation_id}",
            frame.correlation_id
        )));
    }
    Ok(frame)
}

/// SASL rounds a client follows at most (SCRAM has two).
const MAX_SASL_ROUNDS: usize = 3;

/// Largest response frame a client accepts.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 << 20;

/// A blocking connection to one broker shard: each request waits for its response.
pub struct Connection {
    addr: SocketAddr,
    stream: Socket,
    next_correlation: u32,
    client_id: String,
    max_response_bytes: usize,
}

impl Connection {
    /// Opens a connection to `addr` within `timeout` (TLS with `tls`: the handshake within
    /// it too); requests carry `client_id`.
    ///
    /// With `sasl` it authenticates before it is handed out (the broker's native listener
    /// must enable the mechanism): a wrong password fails here with
    /// SASL_AUTHENTICATION_FAILED.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        client_id: &str,
        tls: Option<&crate::tls::ClientTls>,
        sasl: Option<&super::SaslCredentials>,
    ) -> Result<Connection, ClientError> {
        let stream =
            Socket::connect(addr, timeout, tls).map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let mut c = Connection {
            addr,
            stream,
            next_correlation: 1,
            client_id: client_id.to_string(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        };
        if let Some(creds) = sasl {
            c.set_read_timeout(Some(timeout));
            c.authenticate(creds)?;
        }
        Ok(c)
    }

    /// The SASL exchange: SaslHandshake, then SaslAuthenticate until the mechanism is done
    /// (SCRAM: two rounds, the broker's signature checked).
    fn authenticate(&mut self, creds: &super::SaslCredentials) -> Result<(), ClientError> {
        use crate::auth::session::SaslClient;
        use crate::protocol::messages::{
            SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
            SaslHandshakeResponse,
        };
        use crate::protocol::ErrorCode;
        let mut client = SaslClient::new(&creds.mechanism, &creds.username, &creds.password)
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "unknown SASL mechanism '{}' (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)",
                    creds.mechanism
                ))
            })?;
        let req = SaslHandshakeRequest {
            mechanism: creds.mechanism.clone(),
        };
        let (r, _): (SaslHandshakeResponse, _) = self.call(ApiKey::SaslHandshake, &req, &[])?;
        if r.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.error_code),
                format!(
                    "SASL mechanism {}: the broker offers {:?}",
                    creds.mechanism, r.mechanisms
                ),
            ));
        }
        let mut message = client.first();
        // PLAIN takes one round, SCRAM two: a broker asking for more is not followed.
        for _ in 0..MAX_SASL_ROUNDS {
            let req = SaslAuthenticateRequest {
                auth_bytes: message,
            };
            let (r, _): (SaslAuthenticateResponse, _) =
                self.call(ApiKey::SaslAuthenticate, &req, &[])?;
            if r.error_code != 0 {
                return Err(ClientError::broker(
                    ErrorCode::from_code(r.error_code),
                    r.message,
                ));
            }
            match client.next(&r.auth_bytes) {
                Ok(Some(next)) => message = next,
                Ok(None) => return Ok(()),
                Err(e) => return Err(ClientError::Invalid(format!("SASL: {e}"))),
            }
        }
        Err(ClientError::Invalid(
            "SASL: the broker asked for more rounds than the mechanism has".into(),
        ))
    }

    /// The socket, for a pipelined connection that takes it over once authenticated.
    pub(super) fn into_socket(self) -> Socket {
        self.stream
    }

    /// The shard address this connection talks to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether this idle connection can no longer be used: the broker closed it (as it does
    /// after `--connection-idle-timeout-ms` without a request) or bytes nobody asked for are
    /// waiting. Looked at without blocking, before a pooled connection is reused, so a call
    /// does not fail only because the connection sat idle.
    pub fn is_stale(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut b = [0u8; 1];
        // SAFETY: a peek of at most one byte into a local buffer, on an open socket.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return true; // EOF, or a stray byte
        }
        let e = std::io::Error::last_os_error().raw_os_error();
        !matches!(e, Some(libc::EAGAIN) | Some(libc::EINTR))
    }

    /// Bounds how long a response may take (long polls add their wait to it).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        let _ = self.stream.set_read_timeout(t);
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        if matches!(
            source.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            return ClientError::Timeout(format!("no response from {}", self.addr));
        }
        ClientError::Io {
            addr: self.addr.to_string(),
            source,
        }
    }

    /// Sends a request without waiting (acks=0 produce: the broker answers nothing).
    pub fn send<T>(&mut self, api: ApiKey, meta: &T, payload: &[&[u8]]) -> Result<u32, ClientError>
    where
        T: crate::protocol::frame::EncodeMeta,
    {
        self.send_version(api, 0, meta, payload)
    }

    /// As [`Self::send`], at version `api_version` of the API.
    pub fn send_version<T>(
        &mut self,
        api: ApiKey,
        api_version: u16,
        meta: &T,
        payload: &[&[u8]],
    ) -> Result<u32, ClientError>
    where
        T: crate::protocol::frame::EncodeMeta,
    {
        let meta = encode_meta(meta).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let correlation_id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        let header = RequestHeader {
            api_key: api as u16,
            api_version,
            correlation_id,
            client_id: self.client_id.clone(),
        };
        let wire = encode_request(&header, &meta, payload)
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        self.stream.write_all(&wire).map_err(|e| self.io(e))?;
        Ok(correlation_id)
    }

    /// Reads the response to `correlation_id`.
    pub fn receive(&mut self, correlation_id: u32) -> Result<ResponseFrame, ClientError> {
        let buf =
            read_frame_blocking(&mut self.stream, self.max_response_bytes).map_err(
                |e| match e {
                    crate::protocol::FrameError::Io(io) => self.io(io),
                    other => ClientError::Frame {
                        addr: self.addr.to_string(),
                        source: other,
                    },
                },
            )?;
        parse_response(self.addr, buf, correlation_id)
    }

    /// One request, one response: returns the decoded meta and the frame (for its payload).
    pub fn call<Req, Resp>(
        &mut self,
        api: ApiKey,
        meta: &Req,
        payload: &[&[u8]],
    ) -> Result<(Resp, ResponseFrame), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
        Resp: crate::protocol::frame::DecodeMeta,
    {
        self.call_version(api, 0, meta, payload)
    }

    /// As [`Self::call`], at version `api_version` of the API.
    pub fn call_version<Req, Resp>(
        &mut self,
        api: ApiKey,
        api_version: u16,
        meta: &Req,
        payload: &[&[u8]],
    ) -> Result<(Resp, ResponseFrame), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
        Resp: crate::protocol::frame::DecodeMeta,
    {
        let id = self.send_version(api, api_version, meta, payload)?;
        let frame = self.receive(id)?;
        let resp = frame
            .decode_meta::<Resp>()
            .map_err(|source| ClientError::Frame {
                addr: self.addr.to_string(),
                source,
            })?;
        Ok((resp, frame))
    }
}
