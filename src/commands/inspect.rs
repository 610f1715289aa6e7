//! `edi-inbox inspect`: print each interchange's envelope, touching no database.

use serde::Serialize;

use crate::cli::InspectArgs;
use crate::edifact::{self, EnvelopeError, Interchange};
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
        inspect_file(f, args.json, &mut out, &mut tally)?;
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

fn inspect_file(f: &InputFile, json: bool, out: &mut Out, tally: &mut Tally) -> anyhow::Result<()> {
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
    for item in edifact::interchanges(&data) {
        match item {
            Ok(i) => {
                tally.interchanges += 1;
                tally.messages += i.messages.len();
                if json {
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
