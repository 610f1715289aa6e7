//! Messages the client libraries cannot send: written on the wire by hand, as a misbehaving
//! gateway would. A JetStream message with header bytes of the test's choosing (`HPUB`), and a
//! RabbitMQ message whose properties hold bytes that are not UTF-8 (AMQP 0-9-1 frames).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// Publishes `payload` to `subject` on the NATS server at `addr` (`HOST:PORT`) with the header
/// block `headers` exactly as given (`NATS/1.0\r\n...\r\n\r\n`), and waits for the server to
/// have read it (a PING answered).
pub fn nats_hpub(addr: &str, subject: &[u8], headers: &[u8], payload: &[u8]) {
    let stream = TcpStream::connect(addr).expect("NATS answers");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut info = String::new();
    reader.read_line(&mut info).unwrap();
    assert!(info.starts_with("INFO"), "{info}");
    let mut w = stream;
    w.write_all(
        b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\n",
    )
    .unwrap();
    let mut frame = b"HPUB ".to_vec();
    frame.extend_from_slice(subject);
    frame.extend_from_slice(
        format!(" {} {}\r\n", headers.len(), headers.len() + payload.len()).as_bytes(),
    );
    frame.extend_from_slice(headers);
    frame.extend_from_slice(payload);
    frame.extend_from_slice(b"\r\nPING\r\n");
    w.write_all(&frame).unwrap();
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "NATS closed");
        assert!(!line.starts_with("-ERR"), "{line}");
        if line.starts_with("PONG") {
            break;
        }
    }
}

/// One AMQP frame: type, channel, payload.
fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind];
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f.push(0xCE);
    f
}

fn shortstr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

fn method(class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend_from_slice(&method.to_be_bytes());
    p.extend_from_slice(args);
    p
}

/// Reads one frame; its type and payload.
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 7];
    s.read_exact(&mut head).unwrap();
    let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
    let mut payload = vec![0u8; size + 1];
    s.read_exact(&mut payload).unwrap();
    payload.pop();
    (head[0], payload)
}

/// Reads frames until the method `class`.`method` comes.
fn expect(s: &mut TcpStream, class: u16, id: u16) -> Vec<u8> {
    loop {
        let (kind, p) = read_frame(s);
        if kind == 1 && p.len() >= 4 {
            let (c, m) = (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            );
            assert!(
                !(c == 10 && m == 50),
                "the broker closed the connection: {p:?}"
            );
            assert!(
                !(c == 20 && m == 40),
                "the broker closed the channel: {p:?}"
            );
            if (c, m) == (class, id) {
                return p[4..].to_vec();
            }
        }
    }
}

/// Publishes `body` to `exchange` with `routing_key` on the machine's RabbitMQ (guest/guest,
/// vhost `/`), persistent, with `message_id` and the `headers` (each a long string) as raw
/// bytes, and waits until the broker has taken it (the connection closed cleanly after).
pub fn amqp_publish(
    exchange: &str,
    routing_key: &str,
    message_id: &[u8],
    headers: &[(&[u8], &[u8])],
    body: &[u8],
) {
    let mut s = TcpStream::connect("127.0.0.1:5672").expect("RabbitMQ answers");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"AMQP\x00\x00\x09\x01").unwrap();
    expect(&mut s, 10, 10);
    let mut args = 0u32.to_be_bytes().to_vec();
    shortstr(&mut args, b"PLAIN");
    let response = b"\x00guest\x00guest";
    args.extend_from_slice(&(response.len() as u32).to_be_bytes());
    args.extend_from_slice(response);
    shortstr(&mut args, b"en_US");
    s.write_all(&frame(1, 0, &method(10, 11, &args))).unwrap();
    let tune = expect(&mut s, 10, 30);
    let mut ok = tune[..6].to_vec();
    ok.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&frame(1, 0, &method(10, 31, &ok))).unwrap();
    let mut open = Vec::new();
    shortstr(&mut open, b"/");
    shortstr(&mut open, b"");
    open.push(0);
    s.write_all(&frame(1, 0, &method(10, 40, &open))).unwrap();
    expect(&mut s, 10, 41);
    s.write_all(&frame(1, 1, &method(20, 10, &[0]))).unwrap();
    expect(&mut s, 20, 11);
    let mut publish = 0u16.to_be_bytes().to_vec();
    shortstr(&mut publish, exchange.as_bytes());
    shortstr(&mut publish, routing_key.as_bytes());
    publish.push(0);
    s.write_all(&frame(1, 1, &method(60, 40, &publish)))
        .unwrap();
    // The content header: class 60, weight 0, the body's size, the property flags (headers,
    // delivery mode, message id), then those properties in that order.
    let mut header = 60u16.to_be_bytes().to_vec();
    header.extend_from_slice(&0u16.to_be_bytes());
    header.extend_from_slice(&(body.len() as u64).to_be_bytes());
    let flags: u16 = (1 << 13) | (1 << 12) | (1 << 7);
    header.extend_from_slice(&flags.to_be_bytes());
    let mut table = Vec::new();
    for (name, value) in headers {
        shortstr(&mut table, name);
        table.push(b'S');
        table.extend_from_slice(&(value.len() as u32).to_be_bytes());
        table.extend_from_slice(value);
    }
    header.extend_from_slice(&(table.len() as u32).to_be_bytes());
    header.extend_from_slice(&table);
    header.push(2);
    shortstr(&mut header, message_id);
    s.write_all(&frame(2, 1, &header)).unwrap();
    s.write_all(&frame(3, 1, body)).unwrap();
    let mut close = 200u16.to_be_bytes().to_vec();
    shortstr(&mut close, b"done");
    close.extend_from_slice(&[0, 0, 0, 0]);
    s.write_all(&frame(1, 0, &method(10, 50, &close))).unwrap();
    // Close-Ok comes once the broker has dealt with what came before it on the connection.
    loop {
        let (kind, p) = read_frame(&mut s);
        if kind == 1 && p.len() >= 4 && p[..4] == [0, 10, 0, 51] {
            break;
        }
    }
}
