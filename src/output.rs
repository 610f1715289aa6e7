//! Standard output and standard error for every command: human lines with control characters
//! escaped, and a closed or failing output that never ends a run half-way.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, BufWriter, Stdout, Write};

/// What became of standard output.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Open,
    /// The reader went away (`| head`): nothing more is written, and nothing is wrong.
    Closed,
    /// Writing failed otherwise (a full disk, an I/O error): nothing more is written, and the
    /// command's exit status says so.
    Failed,
}

/// Standard output, buffered for the run.
///
/// A write that fails does not end the command: a closed pipe or a full log file after the
/// first batch must not leave most files unread, nor hide drift found later. Output stops; the
/// work goes on; the exit status tells the truth ([`Out::failed`]).
pub struct Out {
    inner: BufWriter<Stdout>,
    state: State,
}

impl Default for Out {
    fn default() -> Self {
        Out {
            inner: BufWriter::new(io::stdout()),
            state: State::Open,
        }
    }
}

impl Out {
    /// Writes one human line, its control characters escaped (see [`escape`]).
    pub fn line(&mut self, text: &str) {
        if !self.is_open() {
            return;
        }
        let text = escape(text);
        let r = writeln!(self.inner, "{text}");
        self.check(r);
    }

    /// Writes one JSON object on a line of its own (JSON escapes control characters itself).
    /// The last line of `--json` output: `{"summary": ...}`.
    pub fn json_summary<T: serde::Serialize>(&mut self, summary: &T) {
        #[derive(serde::Serialize)]
        struct Last<'a, T> {
            summary: &'a T,
        }
        self.json(&Last { summary });
    }

    pub fn json<T: serde::Serialize>(&mut self, value: &T) {
        if !self.is_open() {
            return;
        }
        // Serialising these plain structures cannot fail (no maps with non-string keys).
        if let Ok(text) = serde_json::to_string(value) {
            let r = writeln!(self.inner, "{}", json_escaped(&text));
            self.check(r);
        }
    }

    /// Writes bytes as they are (`show --raw`).
    pub fn raw(&mut self, bytes: &[u8]) {
        if !self.is_open() {
            return;
        }
        let r = self.inner.write_all(bytes);
        self.check(r);
    }

    /// Flushes, so that a message on standard error comes after what was printed before it.
    pub fn flush(&mut self) {
        if !self.is_open() {
            return;
        }
        let r = self.inner.flush();
        self.check(r);
    }

    /// True where standard output failed for another reason than its reader going away.
    pub fn failed(&self) -> bool {
        self.state == State::Failed
    }

    fn check(&mut self, r: io::Result<()>) {
        let Err(e) = r else { return };
        if self.state != State::Open {
            return;
        }
        if e.kind() == io::ErrorKind::BrokenPipe {
            self.state = State::Closed;
        } else {
            self.state = State::Failed;
            warn(&format!(
                "cannot write to standard output ({e}); the run goes on without printing, and its exit status will say so"
            ));
        }
    }

    fn is_open(&self) -> bool {
        self.state == State::Open
    }
}

/// Prints a problem on standard error, after flushing what came before it on standard output.
pub fn problem(out: &mut Out, text: &str) {
    out.flush();
    warn(text);
}

/// Prints `edi-inbox: TEXT` on standard error, escaped. A standard error that cannot be written
/// (a dead logger) is not a reason to stop, nor to panic as `eprintln!` does.
pub fn warn(text: &str) {
    let _ = writeln!(io::stderr().lock(), "edi-inbox: {}", escape(text));
}

/// A summary line with the time it is said, for a log that cron appends to and that has no
/// times of its own: `LINE  (at 2026-12-04T22:31:00.123Z)`.
pub fn stamped(line: &str) -> String {
    format!("{line}  (at {})", crate::clock::now())
}

/// `1 message`, `2 messages`: a count and its noun, singular for one.
pub fn count<N: Into<u64> + Copy>(n: N, singular: &str, plural: &str) -> String {
    if n.into() == 1 {
        format!("1 {singular}")
    } else {
        format!("{} {plural}", n.into())
    }
}

/// How many characters of a name (a delivery's `edi-filename`, a group reference) a human line
/// shows: a sender may send a name of any length, and a log line of 100 KB helps nobody. JSON
/// and the database keep the name whole.
pub const SHOWN_NAME_CHARS: usize = 200;

/// `text` as a human line shows it: whole where it has at most `max` characters, otherwise its
/// first `max` and how long it is in all (`abc... (100000 bytes in all)`).
pub fn shortened(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => Cow::Owned(format!("{}... ({} bytes in all)", &text[..cut], text.len())),
    }
}

/// Text for a terminal or a log: control characters (C0, DEL, C1), the Unicode line and
/// paragraph separators, and the Unicode controls that reorder what is shown become `\xNN` or `\u{NNNN}`, so that a file name or a partner's
/// identifier can neither start a new line (forging an outcome in a cron log) nor send an
/// escape sequence to the operator's terminal.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut s = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs_escape(c) {
            s.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(s, "\\x{:02X}", c as u32);
        } else {
            let _ = write!(s, "\\u{{{:04X}}}", c as u32);
        }
    }
    Cow::Owned(s)
}

/// JSON text with what serde_json leaves as it is (DEL, the C1 controls such as U+0085 and
/// U+009B, the line and paragraph separators, the controls that reorder text such as U+202E)
/// written as `\uNNNN`, so that a JSON line shown in a terminal or a log reads as it is. They
/// can only stand inside strings, where the escape means the same character.
pub fn json_escaped(text: &str) -> Cow<'_, str> {
    let special = |c: char| needs_escape(c) && (c as u32) >= 0x20;
    if !text.chars().any(special) {
        return Cow::Borrowed(text);
    }
    let mut s = String::with_capacity(text.len() + 12);
    for c in text.chars() {
        if special(c) {
            let _ = write!(s, "\\u{:04X}", c as u32);
        } else {
            s.push(c);
        }
    }
    Cow::Owned(s)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// The error and its causes in one line, each said once: an error whose message already holds
/// its cause's (`cannot open x: Permission denied`) is not followed by that cause again.
pub fn one_message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for link in e.chain() {
        let part = link.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1u32, "message", "messages"), "1 message");
        assert_eq!(count(0u32, "message", "messages"), "0 messages");
        assert_eq!(
            count(2u64, "inbox entry", "inbox entries"),
            "2 inbox entries"
        );
    }

    #[test]
    fn json_has_no_c1_or_reordering_control_unescaped() {
        let text =
            serde_json::to_string(&serde_json::json!({"f": "a\u{85}b\u{9B}c\u{202E}d\u{7F}\n"}))
                .unwrap();
        let escaped = json_escaped(&text);
        assert_eq!(escaped, r#"{"f":"a\u0085b\u009Bc\u202Ed\u007F\n"}"#);
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back["f"], "a\u{85}b\u{9B}c\u{202E}d\u{7F}\n");
        assert_eq!(json_escaped(r#"{"plain":"ünï"}"#), r#"{"plain":"ünï"}"#);
    }

    #[test]
    fn long_names_are_shortened_on_a_char_boundary() {
        assert_eq!(shortened("abc", 3), "abc");
        assert_eq!(shortened("abcd", 3), "abc... (4 bytes in all)");
        assert_eq!(shortened("ééé", 2), "éé... (6 bytes in all)");
        let long = "x".repeat(100_000);
        let shown = shortened(&long, SHOWN_NAME_CHARS);
        assert_eq!(
            shown.len(),
            SHOWN_NAME_CHARS + "... (100000 bytes in all)".len()
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
        assert_eq!(escape("a\nb\rc\x1b[31m"), "a\\x0Ab\\x0Dc\\x1B[31m");
        assert_eq!(escape("\u{85}\u{202E}x"), "\\u{0085}\\u{202E}x");
        assert_eq!(escape("a\u{2028}b"), "a\\u{2028}b");
        assert_eq!(escape("tab\there\x7f"), "tab\\x09here\\x7F");
    }
}
