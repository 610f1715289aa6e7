//! The grammar of the service segments (ISO 9735), in nom: one parser per segment over the bytes
//! the lexer found for it (its tag up to, not including, its terminator). The UNA, which comes
//! before any segment, is read by [`super::syntax::parse_una`].
//!
//! Only service segments go through here: a message's own segments are only scanned for their
//! ends. Every parser takes any bytes (whatever stands between two separators is a component),
//! so what makes a segment wrong is an absent mandatory element, which each segment's
//! `missing` names, in the order of its layout, for the checks to report with the segment's
//! byte offset and number.
//!
//! Values come out as they stand ([`Raw`]): release characters and transport line breaks are
//! taken out, and the text decoded, only for the values that are kept.

use nom::combinator::opt;
use nom::sequence::preceded;
use nom::{IResult, Parser};

use super::lexer::{past_released, unescape};
use super::syntax::Separators;

/// A component as it stands in the segment: release characters and line breaks still in it.
pub type Raw<'a> = &'a [u8];

const EMPTY: Raw<'static> = b"";

/// One component: the bytes up to the next component or element separator that no release
/// character makes literal, or the end of the segment. The one place where release characters
/// are handled (a line break a transport put after one does not end its reach).
fn component<'a>(seps: Separators) -> impl Fn(Raw<'a>) -> IResult<Raw<'a>, Raw<'a>> {
    move |input: Raw<'a>| {
        let mut i = 0;
        while let Some(&b) = input.get(i) {
            if Some(b) == seps.release {
                i = past_released(input, i, &seps);
                continue;
            }
            if b == seps.component || b == seps.element {
                break;
            }
            i += 1;
        }
        let i = i.min(input.len());
        Ok((&input[i..], &input[..i]))
    }
}

/// One separator byte.
fn separator<'a>(b: u8) -> impl Fn(Raw<'a>) -> IResult<Raw<'a>, ()> {
    move |input: Raw<'a>| match input.split_first() {
        Some((&first, rest)) if first == b => Ok((rest, ())),
        _ => Err(nom::Err::Error(nom::error::Error::new(
            input,
            nom::error::ErrorKind::Char,
        ))),
    }
}

/// An element of up to `N` components, `c1:c2:...`: absent ones are empty, and components past
/// the `N`th are read and left out (a later syntax version may add some).
fn components<'a, const N: usize>(
    seps: Separators,
) -> impl Fn(Raw<'a>) -> IResult<Raw<'a>, [Raw<'a>; N]> {
    move |input: Raw<'a>| {
        let mut out = [EMPTY; N];
        let (mut rest, first) = component(seps)(input)?;
        if let Some(slot) = out.first_mut() {
            *slot = first;
        }
        let mut k = 1;
        while let (r, Some(c)) =
            opt(preceded(separator(seps.component), component(seps))).parse(rest)?
        {
            if let Some(slot) = out.get_mut(k) {
                *slot = c;
            }
            k += 1;
            rest = r;
        }
        Ok((rest, out))
    }
}

/// The next element, after its element separator; all empty where the segment ends before it.
fn element<'a, const N: usize>(
    seps: Separators,
) -> impl Fn(Raw<'a>) -> IResult<Raw<'a>, [Raw<'a>; N]> {
    move |input: Raw<'a>| {
        let (rest, found) =
            opt(preceded(separator(seps.element), components::<N>(seps))).parse(input)?;
        Ok((rest, found.unwrap_or([EMPTY; N])))
    }
}

/// The tag, the segment's first element: the lexer has read and checked it already.
fn tag<'a>(seps: Separators) -> impl Fn(Raw<'a>) -> IResult<Raw<'a>, ()> {
    move |input: Raw<'a>| components::<1>(seps).map(|_| ()).parse(input)
}

/// Runs a segment's parser. It cannot fail (any bytes are components), but were it ever to, the
/// segment is read as if it had no elements: every mandatory one is then reported missing.
fn parse<'a, T>(body: Raw<'a>, parser: impl Fn(Raw<'a>) -> IResult<Raw<'a>, T>, empty: T) -> T {
    parser(body).map_or(empty, |(_, value)| value)
}

/// The first of `mandatory` (a value and the element it is) that is empty once its release
/// characters and line breaks are taken out.
fn first_missing(seps: &Separators, mandatory: &[(Raw<'_>, &'static str)]) -> Option<&'static str> {
    // Empty, or nothing but line breaks and release characters: checked on the bytes as they
    // stand, since this runs for every message.
    let absent = |raw: Raw<'_>| {
        raw.iter()
            .all(|&b| seps.is_line_break(b) || Some(b) == seps.release)
            && unescape(raw, seps).is_empty()
    };
    mandatory
        .iter()
        .find(|(raw, _)| absent(raw))
        .map(|(_, element)| *element)
}

/// UNB, interchange header:
/// `UNB+S001+S002+S003+S004+0020[+S005[+0026[+0029[+0031[+0032[+0035]]]]]]`
/// - S001 syntax identifier: 0001 syntax identifier (M) : 0002 syntax version number (M)
///   [: 0080 service code list directory version : 0133 character encoding, version 4]
/// - S002 interchange sender: 0004 sender identification (M) : 0007 partner identification
///   code qualifier : 0008 address for reverse routing [: 0042 internal sub-identification]
/// - S003 interchange recipient: 0010 recipient identification (M) : 0007 qualifier : 0014
///   routing address [: 0046 internal sub-identification]
/// - S004 date and time of preparation: 0017 date : 0019 time
/// - 0020 interchange control reference (M)
/// - S005 recipient's reference/password details: 0022 reference/password : 0025 qualifier
/// - 0026 application reference; 0029 processing priority code; 0031 acknowledgement request;
///   0032 interchange agreement identifier; 0035 test indicator
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unb<'a> {
    pub s001: [Raw<'a>; 2],
    pub s002: [Raw<'a>; 3],
    pub s003: [Raw<'a>; 3],
    pub s004: [Raw<'a>; 2],
    pub e0020: Raw<'a>,
    pub s005: [Raw<'a>; 1],
    pub e0026: Raw<'a>,
    pub e0029: Raw<'a>,
    pub e0031: Raw<'a>,
    pub e0032: Raw<'a>,
    pub e0035: Raw<'a>,
}

impl<'a> Unb<'a> {
    pub fn parse(body: Raw<'a>, seps: Separators) -> Unb<'a> {
        let grammar = move |i: Raw<'a>| {
            let (i, _) = tag(seps)(i)?;
            let (i, (s001, s002, s003, s004, [e0020])) = (
                element::<2>(seps),
                element::<3>(seps),
                element::<3>(seps),
                element::<2>(seps),
                element::<1>(seps),
            )
                .parse(i)?;
            let (i, (s005, [e0026], [e0029], [e0031], [e0032], [e0035])) = (
                element::<1>(seps),
                element::<1>(seps),
                element::<1>(seps),
                element::<1>(seps),
                element::<1>(seps),
                element::<1>(seps),
            )
                .parse(i)?;
            let unb = Unb {
                s001,
                s002,
                s003,
                s004,
                e0020,
                s005,
                e0026,
                e0029,
                e0031,
                e0032,
                e0035,
            };
            Ok((i, unb))
        };
        let empty = Unb {
            s001: [EMPTY; 2],
            s002: [EMPTY; 3],
            s003: [EMPTY; 3],
            s004: [EMPTY; 2],
            e0020: EMPTY,
            s005: [EMPTY; 1],
            e0026: EMPTY,
            e0029: EMPTY,
            e0031: EMPTY,
            e0032: EMPTY,
            e0035: EMPTY,
        };
        parse(body, grammar, empty)
    }

    /// The first mandatory element that is empty. The date and time (S004) are mandatory too,
    /// but real files leave them out, and they are not part of the key, so they are not checked.
    /// The key's parts (0004, 0010, 0020) made only of spaces are missing too: every partner
    /// that blanks its identification would otherwise share one key.
    pub fn missing(&self, seps: &Separators) -> Option<&'static str> {
        let key = [
            (self.s002[0], "interchange sender identification (0004)"),
            (self.s003[0], "interchange recipient identification (0010)"),
            (self.e0020, "interchange control reference (0020)"),
        ];
        first_missing(
            seps,
            &[
                (self.s001[0], "syntax identifier (S001/0001)"),
                (self.s001[1], "syntax version number (S001/0002)"),
            ],
        )
        .or_else(|| {
            key.iter()
                .find(|(raw, _)| unescape(raw, seps).iter().all(|&b| b == b' '))
                .map(|(_, element)| *element)
        })
    }
}

/// UNG, functional group header: `UNG+0038+S006+S007+S004+0048[+0051[+S008[+0058]]]`
/// - 0038 message group identification
/// - S006 application sender identification: 0040 : 0007 qualifier
/// - S007 application recipient identification: 0044 : 0007 qualifier
/// - S004 date and time of preparation: 0017 : 0019
/// - 0048 group reference number (M)
/// - 0051 controlling agency; S008 message version (0052 : 0054 : 0057); 0058 application
///   password (not used by the envelope)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ung<'a> {
    pub e0038: Raw<'a>,
    pub s006: [Raw<'a>; 2],
    pub s007: [Raw<'a>; 2],
    pub e0048: Raw<'a>,
}

impl<'a> Ung<'a> {
    pub fn parse(body: Raw<'a>, seps: Separators) -> Ung<'a> {
        let grammar = move |i: Raw<'a>| {
            let (i, _) = tag(seps)(i)?;
            let (i, ([e0038], s006, s007, _s004, [e0048])) = (
                element::<1>(seps),
                element::<2>(seps),
                element::<2>(seps),
                element::<2>(seps),
                element::<1>(seps),
            )
                .parse(i)?;
            Ok((
                i,
                Ung {
                    e0038,
                    s006,
                    s007,
                    e0048,
                },
            ))
        };
        let empty = Ung {
            e0038: EMPTY,
            s006: [EMPTY; 2],
            s007: [EMPTY; 2],
            e0048: EMPTY,
        };
        parse(body, grammar, empty)
    }

    pub fn missing(&self, seps: &Separators) -> Option<&'static str> {
        first_missing(seps, &[(self.e0048, "group reference number (0048)")])
    }
}

/// UNH, message header: `UNH+0062+S009[+0068[+S010]]`
/// - 0062 message reference number (M)
/// - S009 message identifier: 0065 message type (M) : 0052 version : 0054 release : 0051
///   controlling agency [: 0057 association assigned code]
/// - 0068 common access reference; S010 status of the transfer (not used by the envelope)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unh<'a> {
    pub e0062: Raw<'a>,
    pub s009: [Raw<'a>; 5],
}

impl<'a> Unh<'a> {
    pub fn parse(body: Raw<'a>, seps: Separators) -> Unh<'a> {
        let grammar = move |i: Raw<'a>| {
            let (i, _) = tag(seps)(i)?;
            let (i, ([e0062], s009)) = (element::<1>(seps), element::<5>(seps)).parse(i)?;
            Ok((i, Unh { e0062, s009 }))
        };
        let empty = Unh {
            e0062: EMPTY,
            s009: [EMPTY; 5],
        };
        parse(body, grammar, empty)
    }

    pub fn missing(&self, seps: &Separators) -> Option<&'static str> {
        first_missing(
            seps,
            &[
                (self.e0062, "message reference number (0062)"),
                (self.s009[0], "message type (0065)"),
            ],
        )
    }
}

/// A trailer: `UNT+0074+0062` (message: number of segments, message reference number),
/// `UNE+0060+0048` (group: number of messages, group reference number) or `UNZ+0036+0020`
/// (interchange: interchange control count, interchange control reference). Both elements are
/// mandatory; an absent count is reported as a count that is not a number, an absent reference
/// as one that does not match its header's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer<'a> {
    pub count: Raw<'a>,
    pub reference: Raw<'a>,
}

impl<'a> Trailer<'a> {
    pub fn parse(body: Raw<'a>, seps: Separators) -> Trailer<'a> {
        let grammar = move |i: Raw<'a>| {
            let (i, _) = tag(seps)(i)?;
            let (i, ([count], [reference])) = (element::<1>(seps), element::<1>(seps)).parse(i)?;
            Ok((i, Trailer { count, reference }))
        };
        parse(
            body,
            grammar,
            Trailer {
                count: EMPTY,
                reference: EMPTY,
            },
        )
    }
}

/// UNT, message trailer: `UNT+0074+0062`
/// - 0074 number of segments in the message, UNH and UNT included (M)
/// - 0062 message reference number, the UNH's (M)
pub fn unt(body: Raw<'_>, seps: Separators) -> Trailer<'_> {
    Trailer::parse(body, seps)
}

/// UNE, functional group trailer: `UNE+0060+0048`
/// - 0060 number of messages in the group (M)
/// - 0048 group reference number, the UNG's (M)
pub fn une(body: Raw<'_>, seps: Separators) -> Trailer<'_> {
    Trailer::parse(body, seps)
}

/// UNZ, interchange trailer: `UNZ+0036+0020`
/// - 0036 interchange control count: the messages, or the groups where there are groups (M)
/// - 0020 interchange control reference, the UNB's (M)
pub fn unz(body: Raw<'_>, seps: Separators) -> Trailer<'_> {
    Trailer::parse(body, seps)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Separators = Separators::LEVEL_A;

    #[test]
    fn unb_elements_and_components_by_their_numbers() {
        let unb = Unb::parse(
            b"UNB+UNOC:3:x+S?+1:14:R+REC:ZZ+240101:1200+REF1+PW+APP++1++1",
            A,
        );
        assert_eq!(unb.s001, [&b"UNOC"[..], b"3"]);
        assert_eq!(unb.s002, [&b"S?+1"[..], b"14", b"R"]);
        assert_eq!(unb.s003, [&b"REC"[..], b"ZZ", b""]);
        assert_eq!(unb.e0020, b"REF1");
        assert_eq!(
            (unb.e0026, unb.e0029, unb.e0031),
            (&b"APP"[..], &b""[..], &b"1"[..])
        );
        assert_eq!(unb.e0035, b"1");
        assert_eq!(unb.missing(&A), None);
        let short = Unb::parse(b"UNB+UNOC+S+R", A);
        assert_eq!(short.missing(&A), Some("syntax version number (S001/0002)"));
        assert_eq!(short.e0020, b"");
    }

    #[test]
    fn release_characters_and_line_breaks_are_handled_once() {
        let unh = Unh::parse(b"UNH+1?:2?+3+ORD\r\nERS:D", A);
        assert_eq!(unh.e0062, b"1?:2?+3");
        assert_eq!(unh.s009[0], b"ORD\r\nERS");
        // A release character whose next byte comes after a wrapped line still releases it.
        let t = Trailer::parse(b"UNT+2+A?\r\n+B", A);
        assert_eq!(t.reference, b"A?\r\n+B");
        // Level B: no release character, other separators.
        let b = Trailer::parse(b"UNZ\x1d1\x1dR?1", Separators::LEVEL_B);
        assert_eq!((b.count, b.reference), (&b"1"[..], &b"R?1"[..]));
    }

    #[test]
    fn mandatory_elements_are_named_in_the_order_of_the_layout() {
        assert_eq!(
            Unh::parse(b"UNH++", A).missing(&A),
            Some("message reference number (0062)")
        );
        assert_eq!(
            Unh::parse(b"UNH+1+:D", A).missing(&A),
            Some("message type (0065)")
        );
        assert_eq!(
            Ung::parse(b"UNG+X+S+R+1:1", A).missing(&A),
            Some("group reference number (0048)")
        );
        // Line breaks alone are no value.
        assert_eq!(
            Unh::parse(b"UNH+\r\n+X", A).missing(&A),
            Some("message reference number (0062)")
        );
    }

    #[test]
    fn extra_components_and_elements_are_left_out() {
        let unh = Unh::parse(b"UNH+1+A:B:C:D:E:F:G+X+Y:Z", A);
        assert_eq!(unh.s009, [&b"A"[..], b"B", b"C", b"D", b"E"]);
        let t = Trailer::parse(b"UNT+1+2+3+4", A);
        assert_eq!((t.count, t.reference), (&b"1"[..], &b"2"[..]));
    }
}
