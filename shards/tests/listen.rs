//! Shard listeners bind where a plain server just closed its connections first, leaving them in
//! TIME_WAIT (glommio's own bind is refused there for the whole TIME_WAIT).

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};

use glommio::{LocalExecutorBuilder, Placement};

/// A loopback port with a connection in TIME_WAIT on its server side, left by a std listener
/// (SO_REUSEADDR, no SO_REUSEPORT) that closed the connection first and is gone.
fn port_in_time_wait() -> SocketAddr {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).unwrap();
    let (accepted, _) = server.accept().unwrap();
    drop(accepted);
    // The client sees the close (EOF) before it closes too: the server side is in TIME_WAIT.
    let mut buf = [0u8; 1];
    assert_eq!(client.read(&mut buf).unwrap(), 0);
    drop(client);
    drop(server);
    addr
}

#[test]
fn a_shard_listener_binds_over_a_time_wait_that_glommios_bind_is_refused() {
    let addr = port_in_time_wait();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name("rill-listen-test")
        .io_memory(1 << 20)
        .spawn(move || async move {
            // The setup does make the case: glommio's bind (SO_REUSEPORT only) is refused.
            let plain = glommio::net::TcpListener::bind(addr).map(|_| ());
            let refused = matches!(
                &plain,
                Err(glommio::GlommioError::IoError(e)) if e.kind() == std::io::ErrorKind::AddrInUse
            );
            let ours = rill_shards::listen::listen(addr).map(|l| l.local_addr().unwrap());
            (
                refused,
                format!("{plain:?}"),
                ours.map_err(|e| e.to_string()),
            )
        })
        .unwrap();
    let (refused, plain, ours) = handle.join().unwrap();
    assert!(refused, "glommio's bind over TIME_WAIT: {plain}");
    assert_eq!(ours, Ok(addr));
}

#[test]
fn a_live_plain_listener_still_refuses_a_shard_listener() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name("rill-listen-test")
        .io_memory(1 << 20)
        .spawn(move || async move { rill_shards::listen::listen(addr).map(|_| ()) })
        .unwrap();
    let e = handle.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    drop(server);
}
