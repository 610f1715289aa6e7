//! The segment lexer: finds where each segment starts and ends, honouring the release character
//! and skipping line breaks, without copying or decoding anything.

use super::error::{EnvelopeError, ErrorKind, Tag, show_byte, show_bytes};
use super::syntax::{CR, LF, Separators};

/// One segment as it stands in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawSegment<'a> {
    /// Byte offset of the segment's first byte in the file.
    pub offset: usize,
    /// 1-based number of the segment in the file.
    pub number: usize,
    pub tag: Tag,
    /// The segment from its tag up to, not including, its terminator; still escaped.
    pub body: &'a [u8],
    /// The segment with its terminator, as it stands in the file.
    pub with_terminator: &'a [u8],
    /// True where CR or LF stand inside the body (a transport wrapped the line).
    pub has_line_breaks: bool,
}

impl<'a> RawSegment<'a> {
    /// Offset just past the terminator.
    pub fn end(&self) -> usize {
        self.offset + self.body.len() + 1
    }

    /// An error concerning this segment.
    pub fn error(&self, kind: ErrorKind) -> EnvelopeError {
        EnvelopeError {
            offset: self.offset,
            segment: Some(self.number),
            tag: Some(self.tag),
            kind,
        }
    }
}

/// Index of the first byte at or after `pos` that is not padding between segments.
///
/// Inlined: it runs between every two segments, and most of the time it looks at a byte or two.
#[inline]
pub fn skip_padding(data: &[u8], mut pos: usize, seps: &Separators) -> usize {
    while pos < data.len() && seps.is_padding(data[pos]) {
        pos += 1;
    }
    pos
}

/// Reads the segment that starts at `start` (padding already skipped; `start < data.len()`).
///
/// `number` is the number the segment gets. Fails where the tag is not one, where the file ends
/// before the terminator, or where a release character ends the file.
pub fn read_segment<'a>(
    data: &'a [u8],
    start: usize,
    number: usize,
    seps: &Separators,
) -> Result<RawSegment<'a>, EnvelopeError> {
    read_with(data, start, number, seps, |body| {
        match plain_tag(body, seps) {
            Some(tag) => Ok(tag),
            None => read_odd_tag(body, seps),
        }
    })
}

/// [`read_segment`] for an ANSI X12 segment of an interchange the X12 reader accepted (its
/// delimiters in `seps`, no release character): its identifier is two or three letters or digits
/// (`ST`, `BEG`), which a transport's line break may split.
pub fn read_x12_segment<'a>(
    data: &'a [u8],
    start: usize,
    number: usize,
    seps: &Separators,
) -> Result<RawSegment<'a>, EnvelopeError> {
    read_with(data, start, number, seps, |body| {
        let id_end = body
            .iter()
            .position(|&b| b == seps.element)
            .unwrap_or(body.len());
        let id: Vec<u8> = body[..id_end]
            .iter()
            .copied()
            .filter(|&b| !seps.is_line_break(b))
            .collect();
        std::str::from_utf8(&id)
            .ok()
            .and_then(Tag::x12)
            .ok_or_else(|| show_bytes(&id))
    })
}

/// The segment at `start` up to its terminator, its tag read by `tag` (which gives what it
/// found where that is not a tag).
#[inline]
fn read_with<'a>(
    data: &'a [u8],
    start: usize,
    number: usize,
    seps: &Separators,
    tag: impl FnOnce(&[u8]) -> Result<Tag, String>,
) -> Result<RawSegment<'a>, EnvelopeError> {
    let (end, has_line_breaks) = find_terminator(data, start, seps)?;
    let body = &data[start..end];
    let tag = tag(body).map_err(|found| EnvelopeError {
        offset: start,
        segment: Some(number),
        tag: None,
        kind: ErrorKind::BadTag { found },
    })?;
    Ok(RawSegment {
        offset: start,
        number,
        tag,
        body,
        with_terminator: &data[start..=end],
        has_line_breaks,
    })
}

/// Index of the terminator of the segment starting at `start`, and whether CR or LF stand
/// before it.
///
/// Jumps from one byte that matters (terminator, release character, CR, LF) to the next with
/// [`next_special`]; most of a segment is plain data.
fn find_terminator(
    data: &[u8],
    start: usize,
    seps: &Separators,
) -> Result<(usize, bool), EnvelopeError> {
    let term = seps.terminator;
    // Without a release character, look for the terminator twice rather than branch on it.
    let release = seps.release.unwrap_or(term);
    let mut line_breaks = false;
    let mut i = start;
    loop {
        i = next_special(data, i, term, release);
        let Some(&b) = data.get(i) else { break };
        if b == term {
            return Ok((i, line_breaks));
        }
        if b == release {
            // The next byte that is not a line break is literal.
            let mut j = i + 1;
            while j < data.len() && seps.is_line_break(data[j]) {
                line_breaks = true;
                j += 1;
            }
            if j >= data.len() {
                return Err(EnvelopeError::at(
                    i,
                    ErrorKind::DanglingRelease {
                        release: show_byte(b),
                    },
                ));
            }
            i = j + 1;
            continue;
        }
        line_breaks |= seps.is_line_break(b);
        i += 1;
    }
    Err(unterminated(data, start, seps))
}

/// Index of the first byte at or after `i` that is `term`, `release`, CR or LF; `data.len()`
/// where there is none.
///
/// SSE2, sixteen bytes at a time, rather than the portable eight: measured with
/// `benches/scripts/paired-parser.sh` against a build with the `portable-scan` feature, the SSE2
/// search parses the large interchange faster (see BENCHMARKS.md). `.ci/run` tests the portable
/// version too.
#[cfg(all(target_arch = "x86_64", not(feature = "portable-scan")))]
fn next_special(data: &[u8], mut i: usize, term: u8, release: u8) -> usize {
    while let Some(chunk) = data.get(i..i + 16) {
        // SAFETY: SSE2 is part of the x86_64 baseline, so every x86_64 CPU has it.
        let mask = unsafe { sse2::specials(chunk, term, release) };
        if mask != 0 {
            return i + mask.trailing_zeros() as usize;
        }
        i += 16;
    }
    next_special_tail(data, i, term, release)
}

#[cfg(all(target_arch = "x86_64", not(feature = "portable-scan")))]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };

    use super::{CR, LF};

    /// A bit for each of the first 16 bytes of `chunk` that is `term`, `release`, CR or LF.
    #[target_feature(enable = "sse2")]
    #[inline]
    pub(super) fn specials(chunk: &[u8], term: u8, release: u8) -> u32 {
        let bytes: &[u8; 16] = match chunk.first_chunk() {
            Some(b) => b,
            None => return 0,
        };
        // SAFETY: `bytes` is 16 readable bytes, and `_mm_loadu_si128` needs no alignment.
        let v = unsafe { _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>()) };
        let hits = _mm_or_si128(
            _mm_or_si128(
                _mm_cmpeq_epi8(v, _mm_set1_epi8(term as i8)),
                _mm_cmpeq_epi8(v, _mm_set1_epi8(release as i8)),
            ),
            _mm_or_si128(
                _mm_cmpeq_epi8(v, _mm_set1_epi8(CR as i8)),
                _mm_cmpeq_epi8(v, _mm_set1_epi8(LF as i8)),
            ),
        );
        _mm_movemask_epi8(hits) as u32
    }
}

/// The portable version: eight bytes at a time while none of them matters.
#[cfg(any(not(target_arch = "x86_64"), feature = "portable-scan"))]
fn next_special(data: &[u8], mut i: usize, term: u8, release: u8) -> usize {
    let (t, r) = (splat(term), splat(release));
    while let Some(word) = data.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        if has_byte(w, t) || has_byte(w, r) || has_byte(w, CR_X8) || has_byte(w, LF_X8) {
            break;
        }
        i += 8;
    }
    next_special_tail(data, i, term, release)
}

/// Byte by byte from `i`.
fn next_special_tail(data: &[u8], i: usize, term: u8, release: u8) -> usize {
    data[i.min(data.len())..]
        .iter()
        .position(|&b| b == term || b == release || b == CR || b == LF)
        .map_or(data.len(), |p| i + p)
}

#[cfg_attr(
    all(target_arch = "x86_64", not(feature = "portable-scan")),
    allow(dead_code)
)]
const CR_X8: u64 = 0x0D0D_0D0D_0D0D_0D0D;
#[cfg_attr(
    all(target_arch = "x86_64", not(feature = "portable-scan")),
    allow(dead_code)
)]
const LF_X8: u64 = 0x0A0A_0A0A_0A0A_0A0A;

/// `b` in each of the eight bytes of a word.
#[cfg_attr(
    all(target_arch = "x86_64", not(feature = "portable-scan")),
    allow(dead_code)
)]
#[inline]
fn splat(b: u8) -> u64 {
    u64::from(b) * 0x0101_0101_0101_0101
}

/// True where some byte of `w` equals the byte that `pattern` repeats (the classic
/// "has zero byte" test on `w ^ pattern`; exact, no false positives).
#[cfg_attr(
    all(target_arch = "x86_64", not(feature = "portable-scan")),
    allow(dead_code)
)]
#[inline]
fn has_byte(w: u64, pattern: u64) -> bool {
    let x = w ^ pattern;
    (x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080) != 0
}

/// The error for bytes at the end of the file that no terminator closes: an unterminated segment
/// where they start like one, stray data otherwise.
fn unterminated(data: &[u8], start: usize, seps: &Separators) -> EnvelopeError {
    let rest = &data[start..];
    match read_tag(rest, seps) {
        Ok(tag) => EnvelopeError {
            offset: start,
            segment: None,
            tag: Some(tag),
            kind: ErrorKind::Unterminated {
                terminator: show_byte(seps.terminator),
            },
        },
        Err(_) => {
            let trimmed = rest
                .iter()
                .rposition(|b| !seps.is_padding(*b))
                .map_or(rest, |last| &rest[..=last]);
            EnvelopeError::at(
                start,
                ErrorKind::TrailingData {
                    len: trimmed.len(),
                    found: show_bytes(trimmed),
                },
            )
        }
    }
}

/// The tag: the bytes before the first element or component separator (or the end of `body`),
/// line breaks left out, which must be one upper-case letter and two upper-case letters or digits.
fn read_tag(body: &[u8], seps: &Separators) -> Result<Tag, String> {
    plain_tag(body, seps).map_or_else(|| read_odd_tag(body, seps), Ok)
}

/// The tag of nearly every segment: its first three bytes, followed by a separator or nothing.
///
/// Kept apart from [`read_tag`] so the answer fits in a register: returned inside a
/// `Result<Tag, String>`, the three bytes went through the stack one by one and were read back
/// as a word, and that stalled load (store forwarding) cost more than the rest of the segment.
#[inline]
fn plain_tag(body: &[u8], seps: &Separators) -> Option<Tag> {
    let &tag = body.first_chunk::<3>()?;
    let separated = body
        .get(3)
        .is_none_or(|&d| d == seps.element || d == seps.component);
    (separated && is_tag(&tag)).then_some(Tag(tag))
}

/// [`read_tag`] for a tag that is wrapped, short, long or not one.
#[cold]
#[inline(never)]
fn read_odd_tag(body: &[u8], seps: &Separators) -> Result<Tag, String> {
    let end = body
        .iter()
        .position(|&b| b == seps.element || b == seps.component || b == seps.terminator)
        .unwrap_or(body.len());
    let name: Vec<u8> = body[..end]
        .iter()
        .copied()
        .filter(|&b| !seps.is_line_break(b))
        .collect();
    match <[u8; 3]>::try_from(name.as_slice()) {
        Ok(tag) if is_tag(&tag) => Ok(Tag(tag)),
        _ => Err(show_bytes(&name)),
    }
}

fn is_tag(tag: &[u8; 3]) -> bool {
    tag[0].is_ascii_uppercase()
        && tag[1..]
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Index just past the byte that the release character at `i` of `raw` makes literal: line
/// breaks a transport put after the release character do not end its reach. Where `raw` ends
/// first, `raw.len()` or one past it.
#[inline]
pub fn past_released(raw: &[u8], mut i: usize, seps: &Separators) -> usize {
    i += 1;
    while raw.get(i).is_some_and(|&b| seps.is_line_break(b)) {
        i += 1;
    }
    i + 1
}

/// The value of a raw component: release characters removed, line breaks left out.
///
/// Borrows where there is nothing to remove, which is nearly always.
pub fn unescape<'a>(raw: &'a [u8], seps: &Separators) -> std::borrow::Cow<'a, [u8]> {
    let needs_work = raw
        .iter()
        .any(|&b| Some(b) == seps.release || seps.is_line_break(b));
    if !needs_work {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut released = false;
    for &b in raw {
        if seps.is_line_break(b) {
            continue;
        }
        if !released && Some(b) == seps.release {
            released = true;
            continue;
        }
        released = false;
        out.push(b);
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Separators = Separators::LEVEL_A;

    #[test]
    fn word_test_finds_every_byte_value_at_every_place() {
        for pos in 0..8 {
            for b in 0..=255u8 {
                let mut word = [b.wrapping_add(1); 8];
                word[pos] = b;
                assert!(has_byte(u64::from_le_bytes(word), splat(b)));
                assert!(!has_byte(
                    u64::from_le_bytes([b.wrapping_add(1); 8]),
                    splat(b)
                ));
            }
        }
    }

    #[test]
    fn next_special_finds_the_first_byte_that_matters_anywhere() {
        for len in 0..70 {
            for at in 0..=len {
                let mut data = vec![b'x'; len];
                if at < len {
                    data[at] = b'\'';
                }
                assert_eq!(next_special(&data, 0, b'\'', b'?'), at, "{len} {at}");
                for from in 0..=len {
                    let want = if at < len && from <= at { at } else { len };
                    assert_eq!(next_special(&data, from, b'\'', b'?'), want);
                }
            }
        }
        let data = b"0123456789abcdef0123456789\n";
        assert_eq!(next_special(data, 3, b'\'', b'?'), data.len() - 1);
        assert_eq!(next_special_tail(data, 99, b'\'', b'?'), data.len());
    }

    #[test]
    fn long_segments_are_read_word_by_word_alike() {
        for len in 0..40 {
            let mut data = b"FTX+".to_vec();
            data.extend(std::iter::repeat_n(b'x', len));
            data.extend_from_slice(b"?'y\r\nz'UNZ");
            let s = read_segment(&data, 0, 1, &A).unwrap();
            assert_eq!(s.end(), data.len() - 3, "{len}");
            assert!(s.has_line_breaks);
        }
    }

    #[test]
    fn reads_a_segment_and_its_tag() {
        let data = b"UNB+UNOA:1+X+Y+200101:1200+1'UNZ";
        let s = read_segment(data, 0, 1, &A).unwrap();
        assert_eq!(s.tag, Tag::UNB);
        assert_eq!(s.body, &data[..28]);
        assert_eq!(s.end(), 29);
        assert!(!s.has_line_breaks);
    }

    #[test]
    fn released_terminator_does_not_end_the_segment() {
        let data = b"FTX+AAA+++it?'s fine??'NEXT";
        let s = read_segment(data, 0, 1, &A).unwrap();
        assert_eq!(s.body, b"FTX+AAA+++it?'s fine??");
    }

    #[test]
    fn release_then_line_break_then_separator() {
        let data = b"FTX+a?\r\n+b'";
        let s = read_segment(data, 0, 1, &A).unwrap();
        assert_eq!(s.body.len(), data.len() - 1);
        assert!(s.has_line_breaks);
        assert_eq!(unescape(&s.body[4..], &A).as_ref(), b"a+b");
    }

    #[test]
    fn dangling_release_is_an_error() {
        let e = read_segment(b"FTX+abc?", 0, 1, &A).unwrap_err();
        assert_eq!(e.offset, 7);
        assert!(matches!(e.kind, ErrorKind::DanglingRelease { .. }));
        let e = read_segment(b"FTX+abc?\r\n", 0, 1, &A).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::DanglingRelease { .. }));
    }

    #[test]
    fn unterminated_and_trailing_data_differ() {
        let e = read_segment(b"UNZ+1+1", 0, 9, &A).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Unterminated { .. }), "{e}");
        let e = read_segment(b"some junk\n", 0, 9, &A).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::TrailingData {
                len: 9,
                found: "some junk".into()
            }
        );
    }

    #[test]
    fn bad_tags_are_errors() {
        for bad in [&b"BBBB+1'"[..], b"ab+1'", b"1AB+1'", b"'", b"\x00\x01\x02'"] {
            let e = read_segment(bad, 0, 1, &A).unwrap_err();
            assert!(matches!(e.kind, ErrorKind::BadTag { .. }), "{e}");
        }
    }

    #[test]
    fn tag_may_be_wrapped_and_carry_components() {
        let s = read_segment(b"U\nNH:1+1'", 0, 1, &A).unwrap();
        assert_eq!(s.tag, Tag::UNH);
    }

    #[test]
    fn unescape_keeps_a_released_release() {
        assert_eq!(unescape(b"a??b", &A).as_ref(), b"a?b");
        assert_eq!(unescape(b"a?xb", &A).as_ref(), b"axb");
        assert_eq!(unescape(b"a\r\nb", &A).as_ref(), b"ab");
    }

    #[test]
    fn padding_skips_only_what_is_not_a_separator() {
        assert_eq!(skip_padding(b" \t\r\nUNB", 0, &A), 4);
        let mut s = A;
        s.element = b' ';
        assert_eq!(skip_padding(b" UNB", 0, &s), 0);
    }
}
