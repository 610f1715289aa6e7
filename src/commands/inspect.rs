//! `edi-inbox inspect`: print each interchange's envelope, touching no database.

use serde::Serialize;

use crate::cli::InspectArgs;
use crate::edifact::message::{OutsideRepertoire, Segment};
use crate::edifact::{self, EnvelopeError, Interchange, MessageSegments};
use crate::exit::ExitStatus;
use crate::output::{Out, count, problem};
use crate::walk::{self, InputFile};

/// One message, as `inspect --json` prints it.
#[derive(Debug, Serialize)]
pub struct MessageJson<'a> {
    #[serde(rename = "ref")]
    pub reference: &'a str,
    #[serde(rename = "type")]
    pub message_type: &'a str,
    pub version: &'a str,
    pub release: &'a str,
    pub agency: &'a str,
    pub association_code: Option<&'a str>,
    pub segments: usize,
    pub group: Option<&'a str>,
}

/// One interchange, as `inspect --json` prints it.
#[derive(Debug, Serialize)]
pub struct InterchangeJson<'a> {
    pub file: &'a str,
    pub offset: usize,
    pub sender: &'a str,
    pub sender_qualifier: Option<&'a str>,
    pub recipient: &'a str,
    pub recipient_qualifier: Option<&'a str>,
    pub control_ref: &'a str,
    /// `edifact` or `x12` (issue 41).
    pub standard: &'static str,
    pub syntax: String,
    pub date: &'a str,
    pub time: &'a str,
    pub test: bool,
    pub application_ref: Option<&'a str>,
    pub sha256: String,
    pub groups: usize,
    pub messages: Vec<MessageJson<'a>>,
}

impl<'a> InterchangeJson<'a> {
    pub fn new(file: &'a str, i: &'a Interchange<'_>) -> Self {
        let u = &i.unb;
        InterchangeJson {
            file,
            offset: i.offset,
            sender: &u.sender,
            sender_qualifier: u.sender_qualifier.as_deref(),
            recipient: &u.recipient,
            recipient_qualifier: u.recipient_qualifier.as_deref(),
            control_ref: &u.control_ref,
            standard: i.standard.as_str(),
            syntax: u.syntax(),
            date: &u.date,
            time: &u.time,
            test: u.is_test(),
            application_ref: u.application_ref.as_deref(),
            sha256: i.sha256_hex(),
            groups: i.groups.len(),
            messages: i
                .messages
                .iter()
                .map(|m| MessageJson {
                    reference: &m.reference,
                    message_type: &m.message_type,
                    version: &m.version,
                    release: &m.release,
                    agency: &m.agency,
                    association_code: m.association_code.as_deref(),
                    segments: m.segments,
                    group: m
                        .group
                        .and_then(|g| i.groups.get(g))
                        .map(|g| g.reference.as_str()),
                })
                .collect(),
        }
    }
}

/// One message's segments, as `inspect --segments --json` and `show --segments --json` print
/// it: its envelope's key, group, reference and type, and its segments in the JSON form of
/// docs/parser.md ("A message as JSON").
#[derive(Debug, Serialize)]
pub struct SegmentsJson<'a> {
    pub file: &'a str,
    /// Byte offset of its interchange in the file.
    pub offset: usize,
    /// `edifact` or `x12`: the standard of its interchange, whose key follows.
    pub standard: &'static str,
    pub sender: &'a str,
    pub recipient: &'a str,
    pub control_ref: &'a str,
    pub group: Option<&'a str>,
    #[serde(rename = "ref")]
    pub reference: &'a str,
    #[serde(rename = "type")]
    pub message_type: &'a str,
    /// The bytes its repertoire does not define, read as ISO 8859-1 (never replaced).
    pub outside_repertoire: Option<OutsideJson>,
    pub segments: &'a MessageSegments<'a>,
}

/// [`OutsideRepertoire`] in JSON: how many bytes, and the first segment holding one.
#[derive(Debug, Serialize)]
pub struct OutsideJson {
    pub bytes: usize,
    pub offset: usize,
    pub segment: usize,
    pub tag: String,
}

impl From<OutsideRepertoire> for OutsideJson {
    fn from(o: OutsideRepertoire) -> Self {
        OutsideJson {
            bytes: o.bytes,
            offset: o.offset,
            segment: o.segment,
            tag: o.tag.to_string(),
        }
    }
}

/// Prints each message of `i` with its segments: JSON Lines with `json`, a line per segment
/// otherwise. Returns how many of its messages could not be read (each said, with its byte).
pub fn print_segments(out: &mut Out, file: &str, i: &Interchange<'_>, json: bool) -> usize {
    let mut failed = 0;
    for m in &i.messages {
        let group = m
            .group
            .and_then(|g| i.groups.get(g))
            .map(|g| g.reference.as_str());
        let segments = match edifact::message_segments(i, m) {
            Ok(s) => s,
            Err(e) => {
                failed += 1;
                if json {
                    out.json(&ErrorJson::envelope(file, &e));
                } else {
                    problem(out, &format!("{file}: message {}: {e}", m.reference));
                }
                continue;
            }
        };
        let outside = segments.outside_repertoire();
        if json {
            out.json(&SegmentsJson {
                file,
                offset: i.offset,
                standard: i.standard.as_str(),
                sender: &i.unb.sender,
                recipient: &i.unb.recipient,
                control_ref: &i.unb.control_ref,
                group,
                reference: &m.reference,
                message_type: &m.message_type,
                outside_repertoire: outside.map(OutsideJson::from),
                segments: &segments,
            });
            continue;
        }
        out.line(&format!(
            "{file}: interchange {} at byte {}, message {} ({} {}:{}:{}){}, {}",
            i.unb.control_ref,
            i.offset,
            m.reference,
            m.message_type,
            m.version,
            m.release,
            m.agency,
            group.map(|g| format!(" in group {g}")).unwrap_or_default(),
            count(segments.len() as u64, "segment", "segments"),
        ));
        if let Some(o) = outside {
            out.line(&format!(
                "  {} outside {}, read as ISO 8859-1: the first in {} at byte {} (segment {})",
                count(o.bytes as u64, "byte", "bytes"),
                i.unb.syntax_id,
                o.tag,
                o.offset,
                o.segment
            ));
        }
        let repeats = segments.reading().repetition.is_some();
        for seg in segments.iter() {
            out.line(&format!("  {}", segment_text(&seg, repeats)));
        }
    }
    failed
}

/// A segment for a person: as EDIFACT writes it with the level A characters (`+` between
/// elements, `:` between components, `*` between repetitions, `?` before any of them in a
/// value), whatever the interchange's own, its values decoded, without its terminator.
fn segment_text(seg: &Segment<'_>, repeats: bool) -> String {
    let mut text = String::new();
    let tag = seg.tag_element();
    let elements = std::iter::once(tag).chain(seg.elements());
    for (k, e) in elements.enumerate() {
        if k > 0 {
            text.push('+');
        }
        for (r, rep) in e.repetitions().enumerate() {
            if r > 0 {
                text.push('*');
            }
            for (c, component) in rep.components().enumerate() {
                if c > 0 {
                    text.push(':');
                }
                for ch in component.chars() {
                    if matches!(ch, '+' | ':' | '\'' | '?') || (repeats && ch == '*') {
                        text.push('?');
                    }
                    text.push(ch);
                }
            }
        }
    }
    text
}

/// Input that cannot be parsed, as `inspect --json` prints it.
#[derive(Debug, Serialize)]
pub struct ErrorJson<'a> {
    pub file: &'a str,
    pub error: String,
    pub offset: Option<usize>,
    pub segment: Option<usize>,
    pub kind: &'a str,
}

impl<'a> ErrorJson<'a> {
    pub fn envelope(file: &'a str, e: &EnvelopeError) -> Self {
        ErrorJson {
            file,
            error: e.to_string(),
            offset: Some(e.offset),
            segment: e.segment,
            kind: e.code(),
        }
    }

    pub fn io(file: &'a str, message: String) -> Self {
        ErrorJson {
            file,
            error: message,
            offset: None,
            segment: None,
            kind: "io",
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    files: usize,
    interchanges: usize,
    messages: usize,
    rejected_files: usize,
}

/// Runs `inspect`.
pub fn run(args: &InspectArgs) -> anyhow::Result<ExitStatus> {
    let mut out = Out::default();
    let mut tally = Tally::default();
    let (files, problems) = walk::collect(&args.paths, &walk::Exclusions::default());
    for p in &problems {
        let file = walk::display(&p.path);
        tally.rejected_files += 1;
        if args.json {
            out.json(&ErrorJson::io(&file, p.message.clone()));
        } else {
            problem(&mut out, &format!("{file}: {}", p.message));
        }
    }
    for f in &files {
        inspect_file(f, args, &mut out, &mut tally)?;
    }
    if !args.json {
        out.line(&format!(
            "{}, {}, {}; {} rejected",
            count(tally.files as u64, "file", "files"),
            count(tally.interchanges as u64, "interchange", "interchanges"),
            count(tally.messages as u64, "message", "messages"),
            count(tally.rejected_files as u64, "file", "files"),
        ));
    }
    out.flush();
    Ok(ExitStatus::from_problems(
        tally.rejected_files + usize::from(out.failed()),
    ))
}

fn inspect_file(
    f: &InputFile,
    args: &InspectArgs,
    out: &mut Out,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let json = args.json;
    let file = walk::display(&f.path);
    let data = match walk::read(f) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(()),
        Err(e) => {
            tally.rejected_files += 1;
            let message = walk::describe(&e);
            if json {
                out.json(&ErrorJson::io(&file, message));
            } else {
                problem(out, &format!("{file}: {message}"));
            }
            return Ok(());
        }
    };
    tally.files += 1;
    let mut rejected = false;
    for item in crate::envelopes::interchanges(&data) {
        match item {
            Ok(i) => {
                tally.interchanges += 1;
                tally.messages += i.messages.len();
                if args.segments {
                    rejected |= print_segments(out, &file, &i, json) > 0;
                } else if json {
                    out.json(&InterchangeJson::new(&file, &i));
                } else {
                    print_human(out, &file, &i)?;
                }
            }
            Err(e) => {
                rejected = true;
                if json {
                    out.json(&ErrorJson::envelope(&file, &e));
                } else {
                    problem(out, &format!("{file}: rejected: {e}"));
                }
            }
        }
    }
    if rejected {
        tally.rejected_files += 1;
    }
    Ok(())
}

fn with_qualifier(id: &str, q: Option<&str>) -> String {
    match q {
        Some(q) => format!("{id} (qualifier {q})"),
        None => id.to_string(),
    }
}

fn print_human(out: &mut Out, file: &str, i: &Interchange<'_>) -> anyhow::Result<()> {
    let u = &i.unb;
    let lines = [
        format!("{file}: interchange {} at byte {}", u.control_ref, i.offset),
        format!(
            "  sender     {}",
            with_qualifier(&u.sender, u.sender_qualifier.as_deref())
        ),
        format!(
            "  recipient  {}",
            with_qualifier(&u.recipient, u.recipient_qualifier.as_deref())
        ),
        format!(
            "  syntax     {}{}",
            u.syntax(),
            if i.has_una { " (UNA)" } else { "" }
        ),
        format!("  prepared   {} {}", u.date, u.time),
        format!("  test       {}", if u.is_test() { "yes" } else { "no" }),
        format!("  sha256     {}", i.sha256_hex()),
        format!("  groups     {}", i.groups.len()),
        format!("  messages   {}", i.messages.len()),
    ];
    for l in &lines {
        out.line(l);
    }
    for m in &i.messages {
        let group = m
            .group
            .and_then(|g| i.groups.get(g))
            .map(|g| format!("  group {}", g.reference))
            .unwrap_or_default();
        out.line(&format!(
            "    {:<14} {} {}:{}:{}  {} segments{group}",
            m.reference, m.message_type, m.version, m.release, m.agency, m.segments
        ));
    }
    Ok(())
}
