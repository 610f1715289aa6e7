//! An interchange's bytes as a person reads them: its segments one by one (to set a drifted
//! copy beside the applied one), and the segment around one byte with a marker under it (to
//! show where a rejection is). Pure functions over `&[u8]`, never failing: what does not lex is
//! shown as it stands.

use super::lexer::{read_segment, skip_padding};
use super::syntax::{Separators, parse_una};

/// The most characters of a segment a quote shows, around the byte it marks.
const QUOTE_WIDTH: usize = 100;

/// The segments of `raw` (one interchange, UNA included where it has one), each with its
/// terminator, as they stand (line breaks between segments left out). Where the bytes stop
/// lexing (a broken segment), the rest is one last piece, as it stands.
pub fn split_segments(raw: &[u8]) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let (seps, mut pos) = match raw.strip_prefix(b"UNA") {
        Some(_) => match parse_una(raw, 0) {
            Ok((seps, _)) => {
                pieces.push(&raw[..9.min(raw.len())]);
                (seps, 9)
            }
            Err(_) => return vec![raw],
        },
        None => {
            let at = skip_padding(raw, 0, &Separators::LEVEL_A);
            (Separators::default_for(&raw[at..]), 0)
        }
    };
    let mut number = 1;
    loop {
        pos = skip_padding(raw, pos, &seps);
        if pos >= raw.len() {
            break;
        }
        match read_segment(raw, pos, number, &seps) {
            Ok(segment) => {
                pieces.push(segment.with_terminator);
                pos = segment.end();
                number += 1;
            }
            Err(_) => {
                pieces.push(&raw[pos..]);
                break;
            }
        }
    }
    pieces
}

/// A piece of input shown as text, with the column of one of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Quote {
    /// The segment (or as much of it as fits), bytes other than printable ASCII as `\xNN`,
    /// `…` where it was cut.
    pub text: String,
    /// The column (in characters of `text`, from 0) of the byte quoted.
    pub column: usize,
}

impl Quote {
    /// The two lines a person reads: the text, and a `^` under the byte, both indented by
    /// `indent`.
    pub fn lines(&self, indent: &str) -> [String; 2] {
        [
            format!("{indent}{}", self.text),
            format!("{indent}{}^", " ".repeat(self.column)),
        ]
    }
}

/// The segment of `data` (a file) that holds byte `offset`, with the column of that byte:
/// from the terminator before it to the one after it (the separators of the last UNA before
/// `offset`, else syntax level A's or B's), cut to [`QUOTE_WIDTH`] characters around the byte.
/// An offset at the end of the data quotes the end (a file cut short). `None` for empty data.
pub fn quote_at(data: &[u8], offset: usize) -> Option<Quote> {
    quote_with(data, offset, &|at| separators_before(data, at))
}

/// As [`quote_at`], with the separators in force at a byte given by `seps` (another standard's
/// reader knows its own: `crate::envelopes::quote_at`).
pub fn quote_with(
    data: &[u8],
    offset: usize,
    seps_at: &dyn Fn(usize) -> Separators,
) -> Option<Quote> {
    if data.is_empty() {
        return None;
    }
    // Past the end (a file cut short): the last segment, the marker just after it.
    if offset >= data.len() {
        let seps = seps_at(data.len());
        let end = data
            .iter()
            .rposition(|&b| !seps.is_padding(b))
            .map_or(0, |i| i + 1);
        if end == 0 {
            return None;
        }
        let mut q = quote_with(&data[..end], end - 1, seps_at)?;
        q.column = q.text.chars().count();
        return Some(q);
    }
    let seps = seps_at(offset);
    let released = |i: usize| -> bool {
        // A terminator is data where an odd number of release characters stands before it.
        let Some(release) = seps.release else {
            return false;
        };
        let mut n = 0;
        let mut j = i;
        while j > 0 && data[j - 1] == release {
            n += 1;
            j -= 1;
        }
        n % 2 == 1
    };
    let ends_segment = |i: usize| data[i] == seps.terminator && !released(i);
    let mut start = offset.min(data.len() - 1);
    // The segment starts after the terminator before the byte (the byte itself may be one:
    // then it ends that segment).
    while start > 0 && !ends_segment(start - 1) {
        start -= 1;
    }
    while start < offset && seps.is_padding(data[start]) {
        start += 1;
    }
    let mut end = offset;
    while end < data.len() && !ends_segment(end) {
        end += 1;
    }
    let end = (end + 1).min(data.len());
    // The window: at most QUOTE_WIDTH bytes, the marked one a third of the way in.
    let from = start.max(offset.saturating_sub(QUOTE_WIDTH / 3));
    let to = end.min(from + QUOTE_WIDTH).max(offset.min(data.len()));
    let mut text = String::new();
    let mut column = 0;
    if from > start {
        text.push('…');
    }
    for (i, &b) in data[from..to].iter().enumerate() {
        if from + i == offset {
            column = text.chars().count();
        }
        match b {
            b'\r' => text.push_str("\\r"),
            b'\n' => text.push_str("\\n"),
            b'\t' => text.push_str("\\t"),
            0x20..=0x7e => text.push(b as char),
            _ => text.push_str(&format!("\\x{b:02X}")),
        }
    }
    if offset >= to {
        column = text.chars().count();
    }
    if to < end {
        text.push('…');
    }
    Some(Quote { text, column })
}

/// The separators in force at `offset`: the last UNA before it, else the defaults of the UNB
/// before it.
fn separators_before(data: &[u8], offset: usize) -> Separators {
    let head = &data[..offset.min(data.len())];
    let last = |needle: &[u8]| head.windows(3).rposition(|w| w == needle);
    match (last(b"UNA"), last(b"UNB")) {
        (Some(una), unb) if unb.is_none_or(|unb| unb > una) => parse_una(&data[una..], una)
            .map(|(s, _)| s)
            .unwrap_or(Separators::LEVEL_A),
        (_, Some(unb)) => Separators::default_for(&data[unb..]),
        _ => Separators::LEVEL_A,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_come_one_by_one_with_their_terminators() {
        let raw = b"UNA:+.? 'UNB+UNOA:2+S+R+240101:1200+1'\r\nUNH+1+ORDERS:D:96A:UN'NAD+BY+Haupt?'stra?+e'UNT+3+1'UNZ+1+1'";
        let got: Vec<&str> = split_segments(raw)
            .iter()
            .map(|s| std::str::from_utf8(s).unwrap())
            .collect();
        assert_eq!(
            got,
            [
                "UNA:+.? '",
                "UNB+UNOA:2+S+R+240101:1200+1'",
                "UNH+1+ORDERS:D:96A:UN'",
                "NAD+BY+Haupt?'stra?+e'",
                "UNT+3+1'",
                "UNZ+1+1'"
            ]
        );
        // Broken at the end: the rest as it stands.
        let got = split_segments(b"UNB+UNOA:2+S+R+1'UNH+1+X'NA");
        assert_eq!(got.last().unwrap(), b"NA");
    }

    #[test]
    fn a_quote_marks_the_byte_in_its_segment() {
        let data = b"UNB+UNOA:2+S+R+240101:1200+1'\nUNH+1+ORDERS:D:96A:UN'BGM+220+P?'O1+9'UNT+9+1'";
        let at = data.windows(3).position(|w| w == b"UNT").unwrap() + 4;
        let q = quote_at(data, at).unwrap();
        assert_eq!(q.text, "UNT+9+1'");
        assert_eq!(q.column, 4);
        assert_eq!(q.lines("  ")[1], "      ^");
        // A released terminator does not end the segment.
        let at = data.windows(2).position(|w| w == b"O1").unwrap();
        let q = quote_at(data, at).unwrap();
        assert_eq!(q.text, "BGM+220+P?'O1+9'");
        assert_eq!(&q.text[q.column..q.column + 2], "O1");
        // Bytes that are not text are shown as escapes, the column counted in characters.
        let q = quote_at(b"UNB+\x01\x02X'", 6).unwrap();
        assert_eq!(q.text, "UNB+\\x01\\x02X'");
        assert_eq!(q.column, 12);
        // The end of a file cut short: its last segment, the marker after it.
        let q = quote_at(b"UNB+UNOA:2+S'UNH+1+X'\r\n", 24).unwrap();
        assert_eq!((q.text.as_str(), q.column), ("UNH+1+X'", 8));
        let q = quote_at(b"UNB+UNOA:2+S", 12).unwrap();
        assert_eq!(q.column, q.text.chars().count());
        assert_eq!(quote_at(b"", 0), None);
    }

    #[test]
    fn a_long_segment_is_cut_around_the_byte() {
        let mut data = b"FTX+AAI+++".to_vec();
        data.extend(std::iter::repeat_n(b'A', 500));
        data.extend(b"B");
        data.extend(std::iter::repeat_n(b'C', 500));
        data.push(b'\'');
        let q = quote_at(&data, 510).unwrap();
        assert!(
            q.text.starts_with('…') && q.text.ends_with('…'),
            "{}",
            q.text
        );
        assert_eq!(q.text.chars().nth(q.column), Some('B'));
        assert!(q.text.chars().count() <= QUOTE_WIDTH + 2);
    }

    #[test]
    fn no_input_makes_it_panic() {
        for data in [&b"UNA"[..], b"UNA:+", b"'''", b"???'", b"UNB", b"\xff\xfe"] {
            for at in 0..=data.len() + 2 {
                let _ = quote_at(data, at);
            }
            let _ = split_segments(data);
        }
    }
}
