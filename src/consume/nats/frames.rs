//! The NATS server's protocol to a client, repaired where async-nats would refuse it (see
//! [`super::super::relay`]): a message (`MSG`, `HMSG`) whose subject is not UTF-8, or whose
//! header block is not UTF-8, has a line without a colon, or a header name that is not a
//! token. Such a header block is written again: each readable header as it was, a value that
//! is not UTF-8 escaped, and a line that is no header as the value of
//! `Edi-Inbox-Unreadable-Header`; the reply subject (JetStream's acknowledgement subject) and
//! the payload are never changed. Every other operation passes as it is; after an `INFO` that
//! asks for TLS, everything does (the bytes are no longer the protocol's).

use std::io;

use bytes::{Buf as _, BytesMut};

use super::super::relay::{Repair, escaped, info_tls, text_or_escaped};

/// The header that holds a line of a header block that was no header.
pub const UNREADABLE: &str = "Edi-Inbox-Unreadable-Header";

/// The longest protocol line taken (a subject, a sid, a reply and two sizes are far shorter);
/// a longer one is not the protocol.
const MAX_LINE: usize = 64 * 1024;

#[derive(Default)]
pub struct NatsFrames {
    /// After an INFO that asks for TLS: every byte as it is.
    passthrough: bool,
}

impl Repair for NatsFrames {
    fn repair(&mut self, input: &mut BytesMut, output: &mut Vec<u8>) -> io::Result<()> {
        loop {
            if self.passthrough {
                output.extend_from_slice(input);
                input.clear();
                return Ok(());
            }
            let Some(eol) = input.windows(2).position(|w| w == b"\r\n") else {
                if input.len() > MAX_LINE {
                    return Err(io::Error::other("a NATS protocol line without its end"));
                }
                return Ok(());
            };
            let line = &input[..eol];
            let op = line
                .split(|b| *b == b' ' || *b == b'\t')
                .next()
                .unwrap_or_default()
                .to_ascii_uppercase();
            match op.as_slice() {
                b"MSG" | b"HMSG" => {
                    let headers = op == b"HMSG";
                    let args: Vec<&[u8]> = line
                        .split(|b| *b == b' ' || *b == b'\t')
                        .filter(|a| !a.is_empty())
                        .skip(1)
                        .collect();
                    let sizes = if headers { 2 } else { 1 };
                    if args.len() < 2 + sizes || args.len() > 3 + sizes {
                        return Err(io::Error::other("a NATS message line out of form"));
                    }
                    let number = |a: &[u8]| -> io::Result<usize> {
                        std::str::from_utf8(a)
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .ok_or_else(|| {
                                io::Error::other("a NATS message size that is not a number")
                            })
                    };
                    let total = number(args[args.len() - 1])?;
                    let header_len = if headers {
                        number(args[args.len() - 2])?
                    } else {
                        0
                    };
                    if header_len > total {
                        return Err(io::Error::other("a NATS header larger than its message"));
                    }
                    let frame_end = eol + 2 + total + 2;
                    if input.len() < frame_end {
                        return Ok(());
                    }
                    let body = &input[eol + 2..eol + 2 + total];
                    let (block, payload) = body.split_at(header_len);
                    let subject = args[0];
                    let fixed_block = (headers && !readable(block)).then(|| rewrite(block));
                    let fixed_subject = std::str::from_utf8(subject).is_err();
                    if fixed_block.is_none() && !fixed_subject {
                        output.extend_from_slice(&input[..frame_end]);
                    } else {
                        let block = fixed_block.as_deref().unwrap_or(block);
                        let subject = text_or_escaped(subject);
                        output.extend_from_slice(if headers { b"HMSG " } else { b"MSG " });
                        output.extend_from_slice(subject.as_bytes());
                        // The sid, and the reply subject where there is one, as they were.
                        for a in &args[1..args.len() - sizes] {
                            output.push(b' ');
                            output.extend_from_slice(a);
                        }
                        if headers {
                            output.extend_from_slice(format!(" {}", block.len()).as_bytes());
                        }
                        output.extend_from_slice(
                            format!(" {}\r\n", block.len() + payload.len()).as_bytes(),
                        );
                        output.extend_from_slice(block);
                        output.extend_from_slice(payload);
                        output.extend_from_slice(b"\r\n");
                    }
                    input.advance(frame_end);
                }
                _ => {
                    if op == b"INFO" && asks_for_tls(line) {
                        self.passthrough = true;
                    }
                    output.extend_from_slice(&input[..eol + 2]);
                    input.advance(eol + 2);
                }
            }
        }
    }
}

/// True where the INFO says the connection goes on in TLS, read as JSON (`"tls_required":\ttrue`
/// as well; a `"tls_required":true` inside another member's string is no such thing).
fn asks_for_tls(line: &[u8]) -> bool {
    info_tls(line).is_some_and(|tls| tls.required)
}

/// True where async-nats reads the header block as it is: UTF-8, a `NATS/1.0` version line,
/// then lines `NAME: VALUE` (a value may go on in lines that begin with white space), each name
/// printable ASCII without a colon.
fn readable(block: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(block) else {
        return false;
    };
    let mut lines = text.lines().peekable();
    let Some(version) = lines.next() else {
        return false;
    };
    if !version.starts_with("NATS/1.0") {
        return false;
    }
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let Some((name, _)) = line.split_once(':') else {
            return false;
        };
        if !is_name(name.as_bytes()) {
            return false;
        }
        while lines
            .next_if(|l| l.starts_with(char::is_whitespace))
            .is_some()
        {}
    }
    true
}

fn is_name(name: &[u8]) -> bool {
    name.iter().all(|b| b.is_ascii_graphic() && *b != b':')
}

/// The header block written again in a form async-nats reads, nothing dropped.
fn rewrite(block: &[u8]) -> Vec<u8> {
    let mut lines = block
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let version = lines.next().unwrap_or_default();
    let mut out = Vec::with_capacity(block.len() + 64);
    match std::str::from_utf8(version) {
        Ok(v) if v.starts_with("NATS/1.0") => out.extend_from_slice(v.as_bytes()),
        _ => {
            out.extend_from_slice(b"NATS/1.0\r\n");
            header(&mut out, UNREADABLE, version);
            out.truncate(out.len() - 2);
        }
    }
    out.extend_from_slice(b"\r\n");
    for line in lines {
        if line.is_empty() {
            continue;
        }
        match line.iter().position(|b| *b == b':') {
            Some(colon) if colon > 0 && is_name(&line[..colon]) => {
                let name = std::str::from_utf8(&line[..colon]).unwrap_or(UNREADABLE);
                let value = line[colon + 1..].trim_ascii();
                header(&mut out, name, value);
            }
            _ => header(&mut out, UNREADABLE, line),
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    // A continuation line's leading white space, or a control byte, would make it another
    // line or another header: every such byte is escaped along with what is not UTF-8.
    let value = match std::str::from_utf8(value) {
        Ok(v) if !v.chars().any(char::is_control) => v.to_string(),
        _ => escaped(value),
    };
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut frames = NatsFrames::default();
        let mut input = BytesMut::new();
        let mut output = Vec::new();
        for c in chunks {
            input.extend_from_slice(c);
            frames.repair(&mut input, &mut output).unwrap();
        }
        assert!(
            input.is_empty(),
            "left: {:?}",
            String::from_utf8_lossy(&input)
        );
        output
    }

    #[test]
    fn readable_frames_pass_as_they_are_however_they_are_cut() {
        let stream: &[u8] = b"INFO {\"server_id\":\"x\",\"headers\":true}\r\nPING\r\n+OK\r\nMSG a.b 1 _INBOX.x 3\r\nabc\r\nHMSG a.b 2 $JS.ACK.s.c.1.2.3.4.5 22 25\r\nNATS/1.0\r\nA: b\r\n x\r\n\r\nxyz\r\n-ERR 'boom'\r\n";
        assert_eq!(run(&[stream]), stream);
        let pieces: Vec<&[u8]> = stream.chunks(3).collect();
        assert_eq!(run(&pieces), stream);
    }

    #[test]
    fn unreadable_headers_are_written_again_and_the_rest_kept() {
        let block: &[u8] = b"NATS/1.0\r\nedi-filename: caf\xe9.edi\r\nno colon\r\n\r\n";
        let mut frame = format!(
            "HMSG in 7 $JS.ACK.S.C.1.9.9.1.0 {} {}\r\n",
            block.len(),
            block.len() + 5
        )
        .into_bytes();
        frame.extend_from_slice(block);
        frame.extend_from_slice(b"hello\r\n");
        let out = run(&[&frame]);
        let want_block = b"NATS/1.0\r\nedi-filename: caf\\xE9.edi\r\nEdi-Inbox-Unreadable-Header: no colon\r\n\r\n";
        let mut want = format!(
            "HMSG in 7 $JS.ACK.S.C.1.9.9.1.0 {} {}\r\n",
            want_block.len(),
            want_block.len() + 5
        )
        .into_bytes();
        want.extend_from_slice(want_block);
        want.extend_from_slice(b"hello\r\n");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
        assert!(readable(want_block));
        // A subject that is not UTF-8, escaped; a name that is not a token, kept as a line.
        let out =
            run(&[b"MSG a.\xff 1 2\r\nhi\r\nHMSG s 1 20 20\r\nNATS/1.0\r\nb\xe4d: 1\r\n\r\n\r\n"]);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("MSG a.\\xFF 1 2\r\nhi\r\n"), "{text}");
        assert!(
            text.contains("Edi-Inbox-Unreadable-Header: b\\xE4d: 1\r\n"),
            "{text}"
        );
    }

    #[test]
    fn after_tls_is_asked_for_every_byte_passes() {
        let stream: &[u8] = b"INFO {\"tls_required\":true}\r\n\x16\x03\x01garbage";
        assert_eq!(run(&[stream]), stream);
    }

    /// Issue 38, item 9: TLS asked for in the INFO's JSON however it is spaced; the same words
    /// elsewhere (in a member of another object) ask for nothing, and the messages after them
    /// are repaired.
    #[test]
    fn tls_is_read_from_the_info_as_json() {
        for info in [
            &b"INFO {\"tls_required\": true}\r\n"[..],
            b"INFO {\"server_id\":\"N\",\"tls_required\":\ttrue}\r\n",
            b"INFO\t{ \"tls_required\" : true }\r\n",
        ] {
            let stream = [info, b"\x16\x03\x01garbage"].concat();
            let mut input = BytesMut::from(&stream[..]);
            let mut output = Vec::new();
            NatsFrames::default()
                .repair(&mut input, &mut output)
                .expect("an INFO and bytes after it");
            assert_eq!(
                String::from_utf8_lossy(&output),
                String::from_utf8_lossy(&stream),
                "after {:?} every byte must pass as it is (TLS follows), none held back",
                String::from_utf8_lossy(info)
            );
        }
        let out = run(&[
            b"INFO {\"x\":{\"tls_required\":true},\"tls_required\":false}\r\n",
            b"MSG a.\xff 1 2\r\nhi\r\n",
        ]);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.ends_with("MSG a.\\xFF 1 2\r\nhi\r\n"),
            "no TLS asked for: the message after the INFO must be repaired: {text}"
        );
    }

    #[test]
    fn bytes_that_are_not_the_protocol_end_the_connection() {
        let mut frames = NatsFrames::default();
        let mut output = Vec::new();
        let mut input = BytesMut::from(&b"MSG a 1 notanumber\r\n"[..]);
        assert!(frames.repair(&mut input, &mut output).is_err());
        let mut input = BytesMut::from(&vec![b'x'; MAX_LINE + 1][..]);
        assert!(frames.repair(&mut input, &mut output).is_err());
    }
}
