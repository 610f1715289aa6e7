//! Service characters: the UNA service string advice and the defaults of syntax levels A and B
//! (ISO 9735-1 §7 and Annex A).

use nom::IResult;
use nom::Parser;
use nom::bytes::complete::{tag, take};

use super::error::{EnvelopeError, ErrorKind};

/// Carriage return and line feed: transport line breaks, never data.
pub const CR: u8 = b'\r';
/// See [`CR`].
pub const LF: u8 = b'\n';

/// The service characters in force for one interchange.
///
/// A UNA states them explicitly; without one they are the defaults of syntax level A (`:+.? '`),
/// or of level B (control characters, no release character) when the byte after `UNB` is IS3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Separators {
    /// UNA1: component data element separator.
    pub component: u8,
    /// UNA2: data element separator.
    pub element: u8,
    /// UNA3: decimal mark. Only stated, never used by the envelope.
    pub decimal: u8,
    /// UNA4: release character; `None` where the UNA gives a space or level B is in force.
    pub release: Option<u8>,
    /// UNA5: repetition separator (syntax version 4); `None` for a space.
    ///
    /// The envelope segments never repeat an element, so it is recorded but never split on.
    pub repetition: Option<u8>,
    /// UNA6: segment terminator.
    pub terminator: u8,
}

impl Separators {
    /// Syntax level A defaults, `:+.? '`, used when no UNA precedes the UNB.
    pub const LEVEL_A: Separators = Separators {
        component: b':',
        element: b'+',
        decimal: b'.',
        release: Some(b'?'),
        repetition: None,
        terminator: b'\'',
    };

    /// Syntax level B: IS1 (0x1F) between components, IS3 (0x1D) between elements, IS4 (0x1C) after
    /// each segment, IS2 (0x1E) between repetitions, and no release character.
    pub const LEVEL_B: Separators = Separators {
        component: 0x1F,
        element: 0x1D,
        decimal: b'.',
        release: None,
        repetition: Some(0x1E),
        terminator: 0x1C,
    };

    /// The defaults for an interchange without UNA, told apart by the byte after `UNB`.
    pub fn default_for(unb: &[u8]) -> Separators {
        if unb.get(3) == Some(&Separators::LEVEL_B.element) {
            Separators::LEVEL_B
        } else {
            Separators::LEVEL_A
        }
    }

    /// True for the characters that structure a segment (the decimal mark is only advice).
    pub fn is_service(&self, b: u8) -> bool {
        b == self.component
            || b == self.element
            || b == self.terminator
            || Some(b) == self.release
            || Some(b) == self.repetition
    }

    /// True for a CR or LF that is a transport line break here, so never data.
    ///
    /// A UNA may (unwisely) name CR or LF as a service character; then it keeps that meaning.
    #[inline]
    pub fn is_line_break(&self, b: u8) -> bool {
        (b == CR || b == LF) && !self.is_service(b)
    }

    /// True for the bytes skipped between two segments: CR, LF, space and tab.
    #[inline]
    pub fn is_padding(&self, b: u8) -> bool {
        matches!(b, CR | LF | b' ' | b'\t') && !self.is_service(b)
    }

    /// The six characters as a UNA would state them.
    pub fn una_string(&self) -> [u8; 6] {
        [
            self.component,
            self.element,
            self.decimal,
            self.release.unwrap_or(b' '),
            self.repetition.unwrap_or(b' '),
            self.terminator,
        ]
    }
}

/// nom: `UNA` and its six service characters, taken as they stand.
fn una_raw(input: &[u8]) -> IResult<&[u8], &[u8]> {
    let (rest, (_, six)) = (tag(&b"UNA"[..]), take(6usize)).parse(input)?;
    Ok((rest, six))
}

/// Reads the UNA service string advice at the start of `input`, which lies at byte `offset` of
/// the file. Returns the separators and the bytes after the UNA.
///
/// The caller has checked that `input` starts with `UNA`.
pub fn parse_una(input: &[u8], offset: usize) -> Result<(Separators, &[u8]), EnvelopeError> {
    let (rest, six) = una_raw(input).map_err(|_| {
        EnvelopeError::at(
            offset,
            ErrorKind::TruncatedUna {
                found: input.len().saturating_sub(3).min(6),
            },
        )
    })?;
    let seps = Separators {
        component: six[0],
        element: six[1],
        decimal: six[2],
        release: (six[3] != b' ').then_some(six[3]),
        repetition: (six[4] != b' ').then_some(six[4]),
        terminator: six[5],
    };
    let active = [
        Some(seps.component),
        Some(seps.element),
        Some(seps.terminator),
        seps.release,
        seps.repetition,
    ];
    for (i, a) in active.iter().enumerate() {
        let Some(a) = a else { continue };
        if *a == CR || *a == LF || *a == b' ' {
            return Err(EnvelopeError::at(
                offset,
                ErrorKind::BadUna {
                    reason: format!(
                        "names {} as a service character",
                        super::error::show_byte(*a)
                    ),
                },
            ));
        }
        if active[i + 1..].contains(&Some(*a)) {
            return Err(EnvelopeError::at(
                offset,
                ErrorKind::BadUna {
                    reason: format!(
                        "names {} for two service characters",
                        super::error::show_byte(*a)
                    ),
                },
            ));
        }
    }
    Ok((seps, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn una_states_all_six() {
        let (s, rest) = parse_una(b"UNA|^,!_#UNB", 0).unwrap();
        assert_eq!(s.component, b'|');
        assert_eq!(s.element, b'^');
        assert_eq!(s.decimal, b',');
        assert_eq!(s.release, Some(b'!'));
        assert_eq!(s.repetition, Some(b'_'));
        assert_eq!(s.terminator, b'#');
        assert_eq!(rest, b"UNB");
    }

    #[test]
    fn una_space_means_none() {
        let (s, _) = parse_una(b"UNA:+.? '", 0).unwrap();
        assert_eq!(s, Separators::LEVEL_A);
        let (s, _) = parse_una(b"UNA:+.  '", 0).unwrap();
        assert_eq!(s.release, None);
    }

    #[test]
    fn short_una_is_an_error() {
        let e = parse_una(b"UNA:+.", 7).unwrap_err();
        assert_eq!(e.offset, 7);
        assert_eq!(e.kind, ErrorKind::TruncatedUna { found: 3 });
    }

    #[test]
    fn una_with_two_equal_separators_is_an_error() {
        let e = parse_una(b"UNA++.? '", 0).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::BadUna { .. }), "{e}");
        let e = parse_una(b"UNA:+.?\n'", 0).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::BadUna { .. }), "{e}");
    }

    #[test]
    fn level_b_is_told_from_the_byte_after_unb() {
        assert_eq!(
            Separators::default_for(b"UNB\x1dUNOB\x1f3"),
            Separators::LEVEL_B
        );
        assert_eq!(Separators::default_for(b"UNB+UNOA:1"), Separators::LEVEL_A);
        assert_eq!(Separators::default_for(b"UN"), Separators::LEVEL_A);
    }
}
