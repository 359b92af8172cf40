//! Hostile bytes, each on its own connection: each gets an error response or a closed
//! connection for that client only; the broker keeps serving and stored data is intact.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use rill::batch::BatchBuilder;
use rill::client::StartFrom;
use rill::protocol::frame::{
    encode_meta, encode_request, read_frame_blocking, RequestHeader, ResponseFrame,
};
use rill::protocol::messages::{ErrorBody, ProducePartition, ProduceRequest, ProduceResponse};
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{consume_exactly, produce_values, values, TestBroker};

fn connect(b: &TestBroker) -> TcpStream {
    let s = TcpStream::connect(b.bootstrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

/// Reads one response, or `None` if the broker closed the connection.
fn response(s: &mut TcpStream) -> Option<ResponseFrame> {
    match read_frame_blocking(s, 64 << 20) {
        Ok(buf) => Some(ResponseFrame::parse(buf).unwrap()),
        Err(_) => None,
    }
}

fn header(api: u16, correlation_id: u32) -> RequestHeader {
    RequestHeader {
        api_key: api,
        api_version: 0,
        correlation_id,
        client_id: "hostile".into(),
    }
}

fn produce_frame(topic: &str, batch: &[u8]) -> Vec<u8> {
    let meta = encode_meta(&ProduceRequest {
        acks: 1,
        timeout_ms: 10_000,
        partitions: vec![ProducePartition {
            topic: topic.into(),
            partition: 0,
            payload_offset: 0,
            payload_len: batch.len() as u32,
        }],
    })
    .unwrap();
    encode_request(&header(ApiKey::Produce as u16, 7), &meta, &[batch]).unwrap()
}

fn produce_error(b: &TestBroker, topic: &str, batch: &[u8]) -> (ErrorCode, String) {
    let mut s = connect(b);
    s.write_all(&produce_frame(topic, batch)).unwrap();
    let f = response(&mut s).expect("a produce error is answered, not a closed connection");
    assert_eq!(f.correlation_id, 7);
    let r: ProduceResponse = f.decode_meta().unwrap();
    let p = &r.partitions[0];
    (ErrorCode::from_code(p.error_code), p.message.clone())
}

fn good_batch(n: usize) -> Vec<u8> {
    let mut bb = BatchBuilder::new();
    for i in 0..n {
        bb.push(1, None, format!("v{i}").as_bytes(), &[], &[]);
    }
    bb.build().unwrap().to_vec()
}

#[test]
fn hostile_input_is_refused_and_the_broker_keeps_serving() {
    let b = TestBroker::start(1, &["--max-frame-bytes", "1048576"]);
    let mut client = b.client();
    client.create_topic("safe", 1, 1, vec![]).unwrap();
    produce_values(&b, "safe", 0, (0..50).map(|i| format!("keep-{i}")));

    // Random bytes: a garbage length prefix far over the limit, or a garbage header.
    let mut seed = 0x2545F4914F6CDD1Du64;
    for _ in 0..5 {
        let mut s = connect(&b);
        let junk: Vec<u8> = (0..512)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink); // an error frame or nothing, then EOF
    }

    // A truncated frame: the length says 100, 10 bytes come, then the client goes away.
    {
        let mut s = connect(&b);
        s.write_all(&100u32.to_le_bytes()).unwrap();
        s.write_all(&[1u8; 10]).unwrap();
        drop(s);
    }

    // An oversized frame: refused with an error naming the limit, then closed.
    {
        let mut s = connect(&b);
        s.write_all(&(512u32 << 20).to_le_bytes()).unwrap();
        let f = response(&mut s).expect("oversized frame is answered before closing");
        assert_eq!(f.error, ErrorCode::InvalidRequest);
        let body: ErrorBody = f.decode_meta().unwrap();
        assert!(body.message.contains("max-frame-bytes"), "{}", body.message);
        assert!(
            response(&mut s).is_none(),
            "connection closed after an oversized frame"
        );
    }

    // An unknown API key: an error with the request's correlation id; the connection lives on.
    {
        let mut s = connect(&b);
        let meta = encode_meta(&ErrorBody {
            message: "x".into(),
        })
        .unwrap();
        s.write_all(&encode_request(&header(999, 42), &meta, &[]).unwrap())
            .unwrap();
        let f = response(&mut s).unwrap();
        assert_eq!((f.correlation_id, f.error), (42, ErrorCode::InvalidRequest));
        // An unsupported version of a known API.
        let mut h = header(ApiKey::Metadata as u16, 43);
        h.api_version = 77;
        s.write_all(&encode_request(&h, &meta, &[]).unwrap())
            .unwrap();
        let f = response(&mut s).unwrap();
        assert_eq!(
            (f.correlation_id, f.error),
            (43, ErrorCode::UnsupportedVersion)
        );
        // A body that fails rkyv validation.
        let bogus = [0xEEu8; 64];
        s.write_all(&encode_request(&header(ApiKey::Produce as u16, 44), &bogus, &[]).unwrap())
            .unwrap();
        let f = response(&mut s).unwrap();
        assert_eq!((f.correlation_id, f.error), (44, ErrorCode::InvalidRequest));
    }

    // A batch whose CRC is wrong, and one whose body fails rkyv validation with a right CRC.
    let mut bad_crc = good_batch(3);
    let n = bad_crc.len();
    bad_crc[n - 20] ^= 0x5A;
    let (code, msg) = produce_error(&b, "safe", &bad_crc);
    assert_eq!(code, ErrorCode::CorruptMessage, "{msg}");
    assert!(msg.contains("CRC"), "{msg}");
    let mut bad_body = good_batch(3);
    let n = bad_body.len();
    for x in &mut bad_body[rill::batch::HEADER_LEN..n] {
        *x = 0xA5;
    }
    let crc = crc32c::crc32c(&bad_body[24..]);
    bad_body[4..8].copy_from_slice(&crc.to_le_bytes());
    let (code, _) = produce_error(&b, "safe", &bad_body);
    assert_eq!(code, ErrorCode::CorruptMessage);

    // One partition listed twice in one request: the first entry is stored, the second refused.
    {
        let batch = good_batch(2);
        let entry = |at: u32| ProducePartition {
            topic: "safe".into(),
            partition: 0,
            payload_offset: at,
            payload_len: batch.len() as u32,
        };
        let meta = encode_meta(&ProduceRequest {
            acks: 1,
            timeout_ms: 10_000,
            partitions: vec![entry(0), entry(batch.len() as u32)],
        })
        .unwrap();
        let wire =
            encode_request(&header(ApiKey::Produce as u16, 8), &meta, &[&batch, &batch]).unwrap();
        let mut s = connect(&b);
        s.write_all(&wire).unwrap();
        let r: ProduceResponse = response(&mut s).unwrap().decode_meta().unwrap();
        assert_eq!(r.partitions[0].error_code, 0);
        assert_eq!(
            ErrorCode::from_code(r.partitions[1].error_code),
            ErrorCode::InvalidRequest
        );
    }

    // A produce to a topic that does not exist.
    let (code, msg) = produce_error(&b, "missing", &good_batch(1));
    assert_eq!(code, ErrorCode::UnknownTopicOrPartition);
    assert!(msg.contains("missing"), "{msg}");

    // The broker still serves, and the stored data is exactly what was acknowledged.
    produce_values(&b, "safe", 0, (50..60).map(|i| format!("keep-{i}")));
    // The raw batch above stored two records "v0", "v1" at offsets 50 and 51.
    let got = values(&consume_exactly(&b, "safe", StartFrom::Beginning, 62));
    let mut want: Vec<String> = (0..50).map(|i| format!("keep-{i}")).collect();
    want.extend(["v0".to_string(), "v1".to_string()]);
    want.extend((50..60).map(|i| format!("keep-{i}")));
    assert_eq!(got, want);
}
