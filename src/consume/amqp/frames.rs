//! RabbitMQ's AMQP 0-9-1 frames to a client, repaired where lapin would refuse them (see
//! [`super::super::relay`]): a short string that is not UTF-8 (lapin reads every short string
//! as UTF-8) in a delivery's method frame (the consumer tag, exchange, routing key) or in its
//! content header (`message_id`, `content_type`, ..., the names of its headers) is escaped to
//! ASCII, `\xNN`; a header table lapin cannot walk (a field type it does not know) becomes one
//! header, `edi-inbox-unreadable-headers`, holding the table's bytes. The delivery tag, the
//! body and every other frame pass as they are.

use std::io;

use bytes::{Buf as _, BytesMut};

use super::super::relay::{Repair, escaped};

/// The header that holds a header table no client could walk, as its bytes.
pub const UNREADABLE_HEADERS: &[u8] = b"edi-inbox-unreadable-headers";

/// The end of every frame.
const FRAME_END: u8 = 0xCE;

/// The largest frame taken: RabbitMQ's own upper limit of `frame_max` is far lower.
const MAX_FRAME: usize = 128 << 20;

#[derive(Default)]
pub struct AmqpFrames;

impl Repair for AmqpFrames {
    fn repair(&mut self, input: &mut BytesMut, output: &mut Vec<u8>) -> io::Result<()> {
        loop {
            // The broker's answer to a protocol header it does not speak: 8 bytes, no frame.
            if input.starts_with(b"AMQP") {
                if input.len() < 8 {
                    return Ok(());
                }
                output.extend_from_slice(&input[..8]);
                input.advance(8);
                continue;
            }
            if input.len() < 7 {
                return Ok(());
            }
            let size = u32::from_be_bytes([input[3], input[4], input[5], input[6]]) as usize;
            if size > MAX_FRAME {
                return Err(io::Error::other(
                    "an AMQP frame larger than any broker sends",
                ));
            }
            if input.len() < 7 + size + 1 {
                return Ok(());
            }
            if input[7 + size] != FRAME_END {
                return Err(io::Error::other("an AMQP frame without its end"));
            }
            let payload = &input[7..7 + size];
            let repaired = match input[0] {
                1 => deliver(payload),
                2 => content_header(payload),
                _ => None,
            };
            match repaired {
                Some(p) => {
                    output.extend_from_slice(&input[..3]);
                    output.extend_from_slice(&(p.len() as u32).to_be_bytes());
                    output.extend_from_slice(&p);
                    output.push(FRAME_END);
                }
                None => output.extend_from_slice(&input[..7 + size + 1]),
            }
            input.advance(7 + size + 1);
        }
    }
}

/// Reads a short string at `at`: where it ends, and its bytes.
fn short_at(p: &[u8], at: usize) -> Option<(usize, &[u8])> {
    let n = *p.get(at)? as usize;
    let s = p.get(at + 1..at + 1 + n)?;
    Some((at + 1 + n, s))
}

/// Writes a short string, escaped where it is not UTF-8 (and cut to the 255 bytes a short
/// string holds); whether it changed.
fn put_short(out: &mut Vec<u8>, s: &[u8]) -> bool {
    if std::str::from_utf8(s).is_ok() {
        out.push(s.len() as u8);
        out.extend_from_slice(s);
        return false;
    }
    let mut e = escaped(s);
    e.truncate(255);
    out.push(e.len() as u8);
    out.extend_from_slice(e.as_bytes());
    true
}

/// `basic.deliver` (class 60, method 60): consumer tag, delivery tag, redelivered, exchange,
/// routing key. Repaired where a short string is not UTF-8; `None` where nothing is to repair.
fn deliver(p: &[u8]) -> Option<Vec<u8>> {
    if p.len() < 4 || p[..4] != [0, 60, 0, 60] {
        return None;
    }
    let (after_tag, tag) = short_at(p, 4)?;
    let fixed = p.get(after_tag..after_tag + 9)?; // delivery tag (8), redelivered (1)
    let (after_exchange, exchange) = short_at(p, after_tag + 9)?;
    let (end, key) = short_at(p, after_exchange)?;
    let mut out = p[..4].to_vec();
    let mut changed = put_short(&mut out, tag);
    out.extend_from_slice(fixed);
    changed |= put_short(&mut out, exchange);
    changed |= put_short(&mut out, key);
    out.extend_from_slice(&p[end..]);
    changed.then_some(out)
}

/// A content header of class 60 (basic): its properties, short strings escaped where they are
/// not UTF-8 and a header table lapin could not walk replaced; `None` where nothing is to
/// repair (or the header is not one this knows: left for the client to judge).
fn content_header(p: &[u8]) -> Option<Vec<u8>> {
    if p.len() < 14 || p[..2] != [0, 60] {
        return None;
    }
    let flags = u16::from_be_bytes([p[12], p[13]]);
    if flags & 1 != 0 {
        return None;
    }
    let mut out = p[..14].to_vec();
    let mut at = 14;
    let mut changed = false;
    for bit in (2..=15).rev() {
        if flags & (1 << bit) == 0 {
            continue;
        }
        match bit {
            // delivery mode, priority
            12 | 11 => {
                out.push(*p.get(at)?);
                at += 1;
            }
            // timestamp
            6 => {
                out.extend_from_slice(p.get(at..at + 8)?);
                at += 8;
            }
            // headers
            13 => {
                let n = u32::from_be_bytes(p.get(at..at + 4)?.try_into().ok()?) as usize;
                let table = p.get(at + 4..at + 4 + n)?;
                at += 4 + n;
                match walk_table(table) {
                    Some((t, c)) => {
                        changed |= c;
                        out.extend_from_slice(&(t.len() as u32).to_be_bytes());
                        out.extend_from_slice(&t);
                    }
                    None => {
                        changed = true;
                        let mut t = Vec::new();
                        t.push(UNREADABLE_HEADERS.len() as u8);
                        t.extend_from_slice(UNREADABLE_HEADERS);
                        t.push(b'x');
                        t.extend_from_slice(&(table.len() as u32).to_be_bytes());
                        t.extend_from_slice(table);
                        out.extend_from_slice(&(t.len() as u32).to_be_bytes());
                        out.extend_from_slice(&t);
                    }
                }
            }
            // every other basic property is a short string
            _ => {
                let (end, s) = short_at(p, at)?;
                changed |= put_short(&mut out, s);
                at = end;
            }
        }
    }
    out.extend_from_slice(p.get(at..)?);
    changed.then_some(out)
}

/// A field table's entries, their names repaired: the table written again and whether it
/// changed; `None` where a value's type is not one lapin knows.
fn walk_table(t: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut out = Vec::with_capacity(t.len());
    let mut changed = false;
    let mut at = 0;
    while at < t.len() {
        let (end, name) = short_at(t, at)?;
        changed |= put_short(&mut out, name);
        let kind = *t.get(end)?;
        out.push(kind);
        let (used, c) = walk_value(kind, t.get(end + 1..)?, &mut out)?;
        changed |= c;
        at = end + 1 + used;
    }
    Some((out, changed))
}

/// One value of type `kind` at the start of `v`, written to `out`: how many bytes it took and
/// whether it changed; `None` for a type lapin does not know.
fn walk_value(kind: u8, v: &[u8], out: &mut Vec<u8>) -> Option<(usize, bool)> {
    let fixed = |n: usize, out: &mut Vec<u8>| -> Option<(usize, bool)> {
        out.extend_from_slice(v.get(..n)?);
        Some((n, false))
    };
    let length =
        || -> Option<usize> { Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?) as usize) };
    match kind {
        b't' | b'b' | b'B' => fixed(1, out),
        b's' | b'u' | b'U' => fixed(2, out),
        b'I' | b'i' | b'f' => fixed(4, out),
        b'L' | b'l' | b'd' | b'T' => fixed(8, out),
        b'D' => fixed(5, out),
        b'V' => Some((0, false)),
        // Long strings and byte arrays are bytes to lapin, whatever they hold.
        b'S' | b'x' => fixed(4 + length()?, out),
        b'F' => {
            let n = length()?;
            let (t, changed) = walk_table(v.get(4..4 + n)?)?;
            out.extend_from_slice(&(t.len() as u32).to_be_bytes());
            out.extend_from_slice(&t);
            Some((4 + n, changed))
        }
        b'A' => {
            let n = length()?;
            let items = v.get(4..4 + n)?;
            let mut a = Vec::with_capacity(n);
            let mut changed = false;
            let mut at = 0;
            while at < items.len() {
                let k = items[at];
                a.push(k);
                let (used, c) = walk_value(k, items.get(at + 1..)?, &mut a)?;
                changed |= c;
                at += 1 + used;
            }
            out.extend_from_slice(&(a.len() as u32).to_be_bytes());
            out.extend_from_slice(&a);
            Some((4 + n, changed))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind, 0, 1];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f.push(FRAME_END);
        f
    }

    fn run(bytes: &[u8]) -> Vec<u8> {
        let mut input = BytesMut::new();
        let mut output = Vec::new();
        let mut frames = AmqpFrames;
        // Byte by byte: a frame is never judged before it is whole.
        for b in bytes {
            input.extend_from_slice(&[*b]);
            frames.repair(&mut input, &mut output).unwrap();
        }
        assert!(input.is_empty());
        output
    }

    fn header(message_id: &[u8], table: &[u8]) -> Vec<u8> {
        let mut h = vec![0, 60, 0, 0];
        h.extend_from_slice(&5u64.to_be_bytes());
        let flags: u16 = (1 << 13) | (1 << 12) | (1 << 7);
        h.extend_from_slice(&flags.to_be_bytes());
        h.extend_from_slice(&(table.len() as u32).to_be_bytes());
        h.extend_from_slice(table);
        h.push(2);
        h.push(message_id.len() as u8);
        h.extend_from_slice(message_id);
        h
    }

    #[test]
    fn readable_frames_pass_as_they_are() {
        let mut table = vec![12];
        table.extend_from_slice(b"edi-filename");
        table.push(b'S');
        table.extend_from_slice(&4u32.to_be_bytes());
        table.extend_from_slice(b"a\xffb.");
        let mut bytes = frame(2, &header(b"id-1", &table));
        bytes.extend(frame(3, b"hello"));
        bytes.extend(frame(8, b""));
        assert_eq!(run(&bytes), bytes);
    }

    #[test]
    fn short_strings_that_are_not_utf8_are_escaped() {
        let out = run(&frame(2, &header(b"\xff\xfe-1", &[])));
        assert_eq!(out, frame(2, &header(b"\\xFF\\xFE-1", &[])));
        let mut deliver = vec![0, 60, 0, 60, 3];
        deliver.extend_from_slice(b"ctg");
        deliver.extend_from_slice(&7u64.to_be_bytes());
        deliver.push(0);
        deliver.extend_from_slice(&[1, b'x', 2, b'k', 0xE9]);
        let mut want = deliver[..deliver.len() - 3].to_vec();
        want.extend_from_slice(&[5]);
        want.extend_from_slice(b"k\\xE9");
        assert_eq!(run(&frame(1, &deliver)), frame(1, &want));
    }

    #[test]
    fn a_table_no_client_can_walk_is_kept_as_bytes() {
        let table = [1, b'a', b'?', 1, 2, 3];
        let out = run(&frame(2, &header(b"id", &table)));
        let mut kept = vec![UNREADABLE_HEADERS.len() as u8];
        kept.extend_from_slice(UNREADABLE_HEADERS);
        kept.push(b'x');
        kept.extend_from_slice(&(table.len() as u32).to_be_bytes());
        kept.extend_from_slice(&table);
        assert_eq!(out, frame(2, &header(b"id", &kept)));
        // A nested table's names are repaired too.
        let inner = [1, 0xFF, b't', 1];
        let mut outer = vec![1, b'n', b'F'];
        outer.extend_from_slice(&(inner.len() as u32).to_be_bytes());
        outer.extend_from_slice(&inner);
        let out = run(&frame(2, &header(b"id", &outer)));
        assert!(out.windows(4).any(|w| w == b"\\xFF"), "{out:?}");
    }

    #[test]
    fn bytes_that_are_not_frames_end_the_connection() {
        let mut frames = AmqpFrames;
        let mut output = Vec::new();
        let mut input = BytesMut::from(&[1u8, 0, 0, 0, 0, 0, 1, 9, 0x00][..]);
        assert!(frames.repair(&mut input, &mut output).is_err());
    }
}
