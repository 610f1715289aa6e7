//! `edi-inbox stats`, `list` and `show`: what the inbox holds, for the operator.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::{ByArg, ListArgs, ShowArgs, StatsArgs, StatusArg};
use crate::commands::inspect::print_segments;
use crate::exit::ExitStatus;
use crate::filing::NOTE_SUFFIX;
use crate::inbox::{Access, EventFilter, InterchangeKey, Location, Volume, VolumeBy};
use crate::output::{Out, escape, problem};
use crate::standard::Standard;
use crate::status::Status;

#[derive(Debug, Serialize)]
struct StatsJson {
    #[serde(flatten)]
    stats: crate::inbox::Stats,
    database_bytes: u64,
    /// Files in the quarantine folder now (`--quarantine`), where one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    quarantined_now: Option<u64>,
    /// `--by`: what the volumes are counted for.
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'static str>,
    /// `--by`: the volumes of each day and sender, recipient or type.
    #[serde(skip_serializing_if = "Option::is_none")]
    volumes: Option<Vec<Volume>>,
}

/// Runs `stats`.
pub fn stats(
    db: &Location,
    busy_timeout: Duration,
    args: &StatsArgs,
) -> anyhow::Result<ExitStatus> {
    let inbox = super::open_inbox(db, Access::Read, busy_timeout)?;
    let quarantined_now = match &args.quarantine {
        Some(dir) => Some(
            quarantined(dir)
                .with_context(|| format!("cannot read the quarantine folder {}", dir.display()))?,
        ),
        None => None,
    };
    let by = args.by.map(|b| match b {
        ByArg::Sender => (VolumeBy::Sender, "sender"),
        ByArg::Recipient => (VolumeBy::Recipient, "recipient"),
        ByArg::Type => (VolumeBy::MessageType, "type"),
    });
    // From the start of the day --since names (the volumes are whole days): its first ten
    // characters, as parse_since writes every time.
    let since = args
        .since
        .as_deref()
        .map(|t| format!("{}T00:00:00.000Z", t.get(..10).unwrap_or(t)));
    let volumes = match by {
        Some((by, _)) => Some(inbox.volumes(by, since.as_deref())?),
        None => None,
    };
    let s = StatsJson {
        stats: inbox.stats()?,
        database_bytes: inbox.size_bytes(),
        quarantined_now,
        by: by.map(|(_, word)| word),
        volumes,
    };
    let mut out = Out::default();
    if args.json {
        out.json(&s);
    } else {
        let t = &s.stats;
        let none = || "-".to_string();
        for line in [
            format!(
                "database             {} ({} bytes)",
                db.shown(),
                s.database_bytes
            ),
            format!("inbox entries        {}", t.inbox),
            format!("interchanges         {}", t.interchanges),
            format!("messages             {}", t.messages),
            format!("duplicates seen      {}", t.duplicates),
            format!("drift                {}", t.drift),
            format!("rejected files       {}", t.rejected),
            format!("refused, kept        {}", t.refused),
            format!(
                "outbox unpublished   {} ({} of messages, {} CONTRLs)",
                t.outbox_unpublished,
                t.outbox_kinds.message.unpublished,
                t.outbox_kinds.contrl.unpublished
            ),
            format!(
                "outbox failed        {} ({} of messages, {} CONTRLs)",
                t.outbox_failed, t.outbox_kinds.message.failed, t.outbox_kinds.contrl.failed
            ),
            format!(
                "answers held         {}",
                t.acknowledgements
                    .iter()
                    .map(|a| match a.negative {
                        0 => format!("{} {}", a.kind, a.positive),
                        n => format!("{} {} ({n} negative)", a.kind, a.positive + n),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "oldest unpublished   {}",
                t.outbox_oldest_unpublished_age_seconds
                    .map(|s| format!(
                        "{} ago",
                        humantime::format_duration(Duration::from_secs(s.max(0) as u64))
                    ))
                    .unwrap_or_else(none)
            ),
            format!(
                "oldest inbox entry   {}",
                t.oldest_entry.clone().unwrap_or_else(none)
            ),
            format!(
                "newest inbox entry   {}",
                t.newest_entry.clone().unwrap_or_else(none)
            ),
        ] {
            out.line(&line);
        }
        if let (Some(n), Some(dir)) = (s.quarantined_now, &args.quarantine) {
            out.line(&format!("in quarantine now    {n} ({})", dir.display()));
        }
        if let (Some(volumes), Some(word)) = (&s.volumes, s.by) {
            out.line("");
            volume_table(&mut out, word, volumes);
        }
    }
    out.flush();
    Ok(reported(&out))
}

/// The files in the quarantine folder: each a file ingest moved there, beside its
/// `NAME.error.txt` note (not counted), and no hidden file (a move under way).
fn quarantined(dir: &Path) -> std::io::Result<u64> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type()?.is_file() && !name.ends_with(NOTE_SUFFIX) && !name.starts_with('.') {
            n += 1;
        }
    }
    Ok(n)
}

/// `stats --by`: a header, then one line for each day and key, in columns.
fn volume_table(out: &mut Out, word: &str, volumes: &[Volume]) {
    let mut rows = vec![
        [
            "day",
            word,
            "interchanges",
            "messages",
            "duplicates",
            "drift",
            "rejected",
        ]
        .map(String::from),
    ];
    // By message type, only what is counted by it.
    let figure = |n: Option<i64>| n.map_or_else(|| "-".to_string(), |n| n.to_string());
    for v in volumes {
        rows.push([
            v.day.clone(),
            shell_word(&v.key).into_owned(),
            v.interchanges.to_string(),
            v.messages.to_string(),
            figure(v.duplicates),
            figure(v.drift),
            figure(v.rejected),
        ]);
    }
    if volumes.is_empty() {
        out.line(&format!("no volumes by {word} in these days"));
        return;
    }
    for line in columns(&rows, &[false, false, true, true, true, true, true]) {
        out.line(&line);
    }
}

/// Rows as lines of columns, each as wide as its widest cell (counted in characters, as
/// shown: escaped), two spaces apart; `right` aligns the numbers' columns to the right.
fn columns<const N: usize>(rows: &[[String; N]], right: &[bool; N]) -> Vec<String> {
    let shown: Vec<[String; N]> = rows
        .iter()
        .map(|r| r.clone().map(|c| escape(&c).into_owned()))
        .collect();
    let mut width = [0; N];
    for r in &shown {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    shown
        .iter()
        .map(|r| {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = width[i] - c.chars().count();
                let last = i == N - 1;
                if right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// A key's part as a shell takes it: as it is where it holds only characters no shell reads
/// as special, else in single quotes (a quote inside as `'\''`), so that it can be pasted as
/// an argument of `show`.
fn shell_word(text: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "%+,-./:=@_".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        std::borrow::Cow::Borrowed(text)
    } else {
        format!("'{}'", text.replace('\'', r"'\''")).into()
    }
}

/// A key as ingest prints it: `SENDER -> RECIPIENT ref REF`, each part quoted for a shell
/// where it needs it.
fn key_words(sender: &str, recipient: &str, control_ref: &str) -> String {
    format!(
        "{} -> {} ref {}",
        shell_word(sender),
        shell_word(recipient),
        shell_word(control_ref)
    )
}

/// Runs `list`.
pub fn list(db: &Location, busy_timeout: Duration, args: &ListArgs) -> anyhow::Result<ExitStatus> {
    let inbox = super::open_inbox(db, Access::Read, busy_timeout)?;
    let filter = EventFilter {
        status: args.status.map(|s| match s {
            StatusArg::New => Status::New,
            StatusArg::Duplicate => Status::Duplicate,
            StatusArg::Drift => Status::Drift,
            StatusArg::Rejected => Status::Rejected,
            StatusArg::Refused => Status::Refused,
            StatusArg::Failed => Status::Failed,
        }),
        sender: args.sender.clone(),
        recipient: args.recipient.clone(),
        control_ref: args.control_ref.clone(),
        message_type: args.message_type.clone(),
        standard: args.standard.map(|s| match s {
            crate::cli::StandardArg::Edifact => crate::standard::Standard::Edifact,
            crate::cli::StandardArg::X12 => crate::standard::Standard::X12,
        }),
        file: args.file.clone(),
        since: args.since.clone(),
        until: args.until.clone(),
        limit: args.limit,
        offset: args.offset,
    };
    if args.contrl {
        return list_contrls(inbox.as_ref(), &filter, args.json);
    }
    let events = inbox.events(&filter)?;
    let total = inbox.count_events(&filter)?;
    let mut out = Out::default();
    if args.json {
        #[derive(Serialize)]
        struct Listed<'a> {
            #[serde(flatten)]
            event: &'a crate::inbox::Event,
            /// How many events match, whatever --limit and --offset.
            total: u64,
        }
        for event in &events {
            out.json(&Listed { event, total });
        }
        out.flush();
        return Ok(reported(&out));
    }
    if events.is_empty() {
        out.line(&nothing_listed("events", total, args.offset));
        out.flush();
        return Ok(reported(&out));
    }
    let mut rows = vec![
        [
            "time", "status", "file", "key", "type", "messages", "detail",
        ]
        .map(String::from),
    ];
    for e in &events {
        let key = match (&e.sender, &e.recipient, &e.control_ref) {
            // An EDIFACT key as it always stood; another standard's said first, as ingest does.
            (Some(s), Some(r), Some(c)) => match e.standard {
                Some(standard) if standard != Standard::Edifact => format!(
                    "{} {}",
                    standard.as_str().to_uppercase(),
                    key_words(s, r, c)
                ),
                _ => key_words(s, r, c),
            },
            _ => String::new(),
        };
        let detail = match (e.refusal_id, &e.error) {
            (Some(id), error) => format!("refusal {id}: {}", error.as_deref().unwrap_or_default()),
            // A parked event, by the id `publish --retry-parked --kind K --id N` takes.
            (None, error) if e.event_id.is_some() => format!(
                "{} event {}: {}",
                e.event_kind.unwrap_or_default(),
                e.event_id.unwrap_or_default(),
                error.as_deref().unwrap_or_default()
            ),
            (None, Some(error)) => match e.errors {
                Some(n) if n > 1 && e.status == Status::Rejected => {
                    format!("{error} (and {} more errors in the file)", n - 1)
                }
                _ => error.clone(),
            },
            // A sighting: where its file was read from, on which host, where it went.
            (None, None) => filed(&e.filed).unwrap_or_default(),
        };
        rows.push([
            e.time.clone(),
            e.status.label().trim_end().to_string(),
            e.file.clone(),
            key,
            e.message_types.join(","),
            e.messages.map(|n| n.to_string()).unwrap_or_default(),
            detail,
        ]);
    }
    // The header, then each event; under a rejected file, the text at its error's byte.
    let lines = columns(&rows, &[false, false, false, false, false, true, false]);
    for (n, line) in lines.iter().enumerate() {
        out.line(line);
        if let Some(q) = n.checked_sub(1).and_then(|k| events[k].quote.as_ref()) {
            for quoted in q.lines("    ") {
                out.line(&quoted);
            }
        }
    }
    out.line(&listed(
        ["event", "events"],
        events.len(),
        total,
        args.offset,
    ));
    out.flush();
    Ok(reported(&out))
}

/// The last line of a list: how many of how many, and where the next page starts.
fn listed(what: [&str; 2], shown: usize, total: u64, offset: u32) -> String {
    let first = u64::from(offset) + 1;
    let last = u64::from(offset) + shown as u64;
    let [one, what] = what;
    if first == 1 && last == total {
        crate::output::count(total, one, what)
    } else if last < total {
        format!("{what} {first} to {last} of {total}; --offset {last} for the next")
    } else {
        format!("{what} {first} to {last} of {total}")
    }
}

/// What a list says where it shows nothing.
fn nothing_listed(what: &str, total: u64, offset: u32) -> String {
    if total == 0 {
        format!("no {what} match")
    } else {
        format!("no {what} past --offset {offset}: {total} match")
    }
}

/// `list --contrl`: the CONTRLs sent, newest first.
fn list_contrls(
    inbox: &dyn crate::inbox::Inbox,
    filter: &EventFilter,
    json: bool,
) -> anyhow::Result<ExitStatus> {
    let (sent, total) = inbox.sent_contrls(filter)?;
    let mut out = Out::default();
    if json {
        #[derive(Serialize)]
        struct Listed<'a> {
            #[serde(flatten)]
            sent: &'a crate::inbox::SentContrl,
            /// `positive` (acknowledged or received) or `negative` (rejected).
            answer: &'static str,
            total: u64,
        }
        for s in &sent {
            out.json(&Listed {
                sent: s,
                answer: if s.positive() { "positive" } else { "negative" },
                total,
            });
        }
        out.flush();
        return Ok(reported(&out));
    }
    if sent.is_empty() {
        out.line(&nothing_listed("CONTRLs", total, filter.offset));
        out.flush();
        return Ok(reported(&out));
    }
    let mut rows =
        vec![["time", "partner", "answers", "contrl", "answer", "delivery"].map(String::from)];
    for s in &sent {
        let answer = match (s.action.as_str(), &s.error_code) {
            ("7", _) => "positive (7 acknowledged)".to_string(),
            ("8", _) => "positive (8 received)".to_string(),
            // An X12 answer (TA1, 997, 999): TA104 and TA105.
            ("A", _) => "positive (A accepted)".to_string(),
            ("R", Some(code)) => format!("negative (R rejected, TA105 {code})"),
            (a, Some(code)) => format!("negative ({a} rejected, 0085 {code})"),
            (a, None) => format!("negative ({a} rejected)"),
        };
        let delivery = match (&s.published_at, &s.failed_at) {
            (Some(at), _) => format!("published {at}"),
            (None, Some(at)) => format!("failed {at}"),
            (None, None) => "unpublished".to_string(),
        };
        rows.push([
            s.time.clone(),
            // The partner with its qualifier; none given leaves a bare colon.
            shell_word(s.partner.trim_end_matches(':')).into_owned(),
            key_words(&s.sender, &s.recipient, &s.control_ref),
            s.own_ref.clone(),
            answer,
            delivery,
        ]);
    }
    for line in columns(&rows, &[false; 6]) {
        out.line(&line);
    }
    // CONTRLs where all are (their 0083 a digit); answers where X12's are among them (TA104).
    let edifact = sent
        .iter()
        .all(|s| s.action.bytes().all(|b| b.is_ascii_digit()));
    out.line(&listed(
        if edifact {
            ["CONTRL", "CONTRLs"]
        } else {
            ["answer", "answers"]
        },
        sent.len(),
        total,
        filter.offset,
    ));
    out.flush();
    Ok(reported(&out))
}

/// What `show` was asked for.
enum Asked {
    /// A key: its standard where known (an interchange's number says it), sender, recipient,
    /// control reference.
    Key(Option<Standard>, String, String, String),
    /// A number no interchange is stored as.
    NoSuchNumber,
    /// Words that name no interchange: the usage error to say.
    Usage(String),
}

/// The key `show` was given: `SENDER RECIPIENT REF`, or the number an interchange is stored
/// as; `SENDER -> RECIPIENT ref REF` too, as list prints it, where it gets past the shell
/// (after `--`, its `->` quoted).
fn asked(inbox: &dyn crate::inbox::Inbox, words: &[String]) -> anyhow::Result<Asked> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    Ok(match w.as_slice() {
        [id] => match id.parse::<i64>() {
            Ok(n) => match inbox.interchange_key(n)? {
                Some(k) => Asked::Key(Some(k.standard), k.sender, k.recipient, k.control_ref),
                None => Asked::NoSuchNumber,
            },
            Err(_) => Asked::Usage(format!(
                "{id:?} is not the number of an interchange (as show prints it: stored as #N); \
                 name one by its number, or by SENDER RECIPIENT REF"
            )),
        },
        [s, r, c] | [s, "->", r, "ref", c] => {
            Asked::Key(None, s.to_string(), r.to_string(), c.to_string())
        }
        [_, "-", "ref", _] => Asked::Usage(
            "the shell took the > of -> for a redirection (and wrote to a file named after the \
             recipient): quote it ('->'), or give SENDER RECIPIENT REF"
                .to_string(),
        ),
        _ => Asked::Usage(format!(
            "show takes an interchange's number, or SENDER RECIPIENT REF; {} words were given",
            w.len()
        )),
    })
}

/// Runs `show`.
pub fn show(db: &Location, busy_timeout: Duration, args: &ShowArgs) -> anyhow::Result<ExitStatus> {
    let inbox = super::open_inbox(db, Access::Read, busy_timeout)?;
    let mut out = Out::default();
    let (stored, sender, recipient, control_ref) = match asked(inbox.as_ref(), &args.key)? {
        Asked::Key(standard, s, r, c) => (standard, s, r, c),
        Asked::NoSuchNumber => {
            problem(
                &mut out,
                &format!(
                    "no interchange is stored as #{} in {}",
                    args.key[0],
                    db.shown()
                ),
            );
            return Ok(ExitStatus::Problems);
        }
        Asked::Usage(text) => return super::usage(&text),
    };
    let key = |standard| InterchangeKey {
        standard,
        sender: &sender,
        recipient: &recipient,
        control_ref: &control_ref,
    };
    // The standard asked for, else the one an interchange's number said, else the one that
    // holds the key: said, not guessed, where both do.
    let standard = match args.standard.or(stored) {
        Some(standard) => standard,
        None => {
            let mut holding = Vec::new();
            for standard in Standard::ALL {
                if !inbox.key_history(key(standard))?.is_empty()
                    || !inbox.acknowledgements(key(standard))?.is_empty()
                {
                    holding.push(standard);
                }
            }
            match holding.as_slice() {
                [one] => *one,
                [] => Standard::default(),
                _ => {
                    return super::usage(&format!(
                        "{sender} -> {recipient} ref {control_ref} is the key of interchanges of \
                         more than one standard ({}): name one with --standard {}",
                        holding
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        holding
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(" or --standard ")
                    ));
                }
            }
        }
    };
    let h = inbox.key_history(key(standard))?;
    let acks = inbox.acknowledgements(key(standard))?;
    if h.is_empty() && acks.is_empty() {
        // An EDIFACT key is said as it always was; another standard's is named.
        let of = match standard {
            Standard::Edifact => String::new(),
            other => format!("{} ", other.as_str().to_uppercase()),
        };
        problem(
            &mut out,
            &format!(
                "no {of}interchange from {sender} to {recipient} with control reference \
                 {control_ref} is stored in {}",
                db.shown()
            ),
        );
        return Ok(ExitStatus::Problems);
    }
    if args.contrl {
        match acks.first() {
            Some(a) => out.raw(&a.bytes),
            None => {
                problem(&mut out, "no CONTRL answered this interchange");
                out.flush();
                return Ok(ExitStatus::Problems);
            }
        }
        out.flush();
        return Ok(reported(&out));
    }
    if args.diff || args.copy.is_some() {
        let copies = inbox.drifted_copies(key(standard))?;
        return Ok(match args.copy {
            Some(n) => super::drift::raw_copy(&mut out, &copies, n as usize),
            None => super::drift::print(&mut out, &h.interchanges, &copies, args.json),
        });
    }
    if args.raw {
        let pick = h
            .interchanges
            .iter()
            .find(|i| i.in_inbox)
            .or(h.interchanges.last());
        if let Some(i) = pick {
            out.raw(&i.raw);
        } else if let Some(r) = h.rejections.last() {
            // Rejected, never stored as an interchange: the file it came in, as kept.
            out.raw(&r.bytes);
        }
        out.flush();
        return Ok(reported(&out));
    }
    if args.segments {
        return show_segments(&mut out, &h.interchanges, args.json);
    }
    if args.json {
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            /// The standard of the key shown.
            standard: Standard,
            #[serde(flatten)]
            history: &'a crate::inbox::KeyHistory,
            acknowledgements: &'a [crate::inbox::StoredAcknowledgement],
        }
        out.json(&Shown {
            standard,
            history: &h,
            acknowledgements: &acks,
        });
        out.flush();
        return Ok(reported(&out));
    }
    for i in &h.interchanges {
        let q = |id: &str, q: &Option<String>| match q {
            Some(q) => format!("{id} (qualifier {q})"),
            None => id.to_string(),
        };
        for line in [
            format!(
                "interchange {} (stored as #{}{})",
                i.control_ref,
                i.id,
                if i.in_inbox {
                    ", in the inbox"
                } else {
                    ", purged from the inbox"
                }
            ),
            format!("  sender       {}", q(&i.sender, &i.sender_qualifier)),
        ] {
            out.line(&line);
        }
        // EDIFACT's lines as they always were; another standard's interchange says which.
        if i.standard != Standard::Edifact {
            out.line(&format!("  standard     {}", i.standard));
        }
        for line in [
            format!("  recipient    {}", q(&i.recipient, &i.recipient_qualifier)),
            format!("  syntax       {}", i.syntax),
            format!("  prepared     {} {}", i.date, i.time),
            format!("  test         {}", if i.test { "yes" } else { "no" }),
            format!("  sha256       {}", i.sha256),
            format!("  first seen   {} in {}", i.received_at, i.source_file),
        ] {
            out.line(&line);
        }
        if let Some(filed) = filed(&i.filed) {
            out.line(&format!("  filed        {filed}"));
        }
        out.line(&format!("  messages     {}", i.messages.len()));
        for m in &i.messages {
            out.line(&format!(
                "    {:<14} {} {}:{}:{}  {} segments  outbox {}",
                m.reference,
                m.message_type,
                m.version,
                m.release,
                m.agency,
                m.segments,
                m.outbox_published_at
                    .as_deref()
                    .map_or("unpublished".to_string(), |t| format!("published {t}"))
            ));
        }
    }
    if h.interchanges.is_empty() && h.sightings.is_empty() && !h.rejections.is_empty() {
        // Only rejected: there is no envelope stored to show, nor sightings of it.
        out.line(&format!(
            "interchange {control_ref} from {sender} to {recipient}: rejected, never stored"
        ));
    } else {
        out.line(&format!("sightings    {}", h.sightings.len()));
    }
    for s in &h.sightings {
        let detail = if s.status == Status::Drift {
            format!("sha256 {} (first accepted {})", s.sha256, s.stored_sha256)
        } else {
            format!("sha256 {}", s.sha256)
        };
        out.line(&format!(
            "  {}  {}  {}  {detail}",
            s.seen_at,
            s.status.label(),
            s.source_file
        ));
        if let Some(filed) = filed(&s.filed) {
            out.line(&format!("    filed  {filed}"));
        }
    }
    for r in &h.refusals {
        let state = match (&r.resolved_at, &r.resolved_as) {
            (Some(at), Some(how)) => format!("decided again {at} as {how}"),
            _ => "kept, not applied (reapply --refused)".to_string(),
        };
        out.line(&format!(
            "refusal {}  {}  in {}  sha256 {}  seen {} times, first {}, last {}; {state}",
            r.id,
            r.refusal,
            r.source_file,
            r.sha256,
            r.refusal.times_seen,
            r.first_seen_at,
            r.last_seen_at
        ));
    }
    for r in &h.rejections {
        out.line(&format!(
            "rejected     in {}{}: {}; seen {}, first {}, last {}",
            r.source_file,
            // The parser's own words name the byte already where no segment is concerned.
            if r.error.starts_with(&format!("at byte {}", r.byte_offset)) {
                String::new()
            } else {
                format!(" at byte {}", r.byte_offset)
            },
            r.error,
            crate::output::count(r.times_seen.max(0) as u64, "time", "times"),
            r.first_seen_at,
            r.last_seen_at
        ));
        // The text at the byte, from the bytes kept (where the offset lies within them).
        if let Some(q) = usize::try_from(r.byte_offset)
            .ok()
            .filter(|at| *at <= r.bytes.len())
            .and_then(|at| crate::envelopes::quote_at(&r.bytes, at))
        {
            for line in q.lines("             ") {
                out.line(&line);
            }
        }
        out.line(&format!(
            "  file kept  {} bytes{} (show --raw prints them), sha256 {}",
            r.bytes.len(),
            if r.truncated {
                format!(" of {}", r.file_size)
            } else {
                String::new()
            },
            r.file_sha256
        ));
    }
    for a in &acks {
        // An X12 answer (a TA1, a 997 or 999) is told by its action, TA104's `A` or `R`.
        let line = match (a.action.as_str(), a.error_code.as_deref()) {
            ("R", Some(c)) => format!("answered by X12 {}  R rejected, TA105 {c}", a.own_ref),
            ("R", None) => format!("answered by X12 {}  R rejected", a.own_ref),
            ("A", _) => format!("answered by X12 {}  A accepted", a.own_ref),
            (action, code) => format!(
                "answered by CONTRL {}  UCI 0083 {action}{}",
                a.own_ref,
                code.map(|c| format!(", 0085 {c}")).unwrap_or_default()
            ),
        };
        out.line(&format!("{line}  at {}", a.created_at));
    }
    out.flush();
    Ok(reported(&out))
}

/// Where a sighting was read from, on which host, and where its file went, in words; `None`
/// where nothing of it is known (a row from before edi-inbox kept them).
fn filed(f: &crate::inbox::Filed) -> Option<String> {
    if f.source_path.is_none() && f.host.is_none() && f.moved_to.is_none() {
        return None;
    }
    let mut text = match &f.source_path {
        Some(p) => format!("read from {p}"),
        None => "not read from a file".to_string(),
    };
    if let Some(h) = &f.host {
        text = format!("{text} on {h}");
    }
    Some(match (&f.moved_to, &f.source_path) {
        (Some(to), _) => format!("{text}, moved to {to}"),
        (None, Some(_)) => format!("{text}, not moved (or its move not recorded)"),
        (None, None) => text,
    })
}

/// `show --segments`: each message's segments, from the stored bytes of the copy the inbox
/// holds (else the latest), read again as `inspect --segments` reads a file; offsets are within
/// those bytes, and `file` names the file the copy came from.
fn show_segments(
    out: &mut Out,
    copies: &[crate::inbox::StoredInterchange],
    json: bool,
) -> anyhow::Result<ExitStatus> {
    let Some(copy) = copies.iter().find(|i| i.in_inbox).or(copies.last()) else {
        problem(out, "the inbox keeps no bytes of this interchange");
        return Ok(ExitStatus::Problems);
    };
    let mut failed = 0;
    for item in crate::envelopes::interchanges(&copy.raw) {
        match item {
            Ok(i) => failed += print_segments(out, &copy.source_file, &i, json),
            Err(e) => {
                // The inbox stored only what the parser accepted: bytes that no longer parse
                // were changed after.
                failed += 1;
                problem(
                    out,
                    &format!(
                        "the stored bytes of interchange #{} do not parse: {e}",
                        copy.id
                    ),
                );
            }
        }
    }
    out.flush();
    Ok(if failed > 0 {
        ExitStatus::Problems
    } else {
        reported(out)
    })
}

/// The status of a report: its output is its whole work, so output that could not be written
/// (other than to a reader that went away, as `| head` does) is a failure.
fn reported(out: &Out) -> ExitStatus {
    if out.failed() {
        ExitStatus::Fatal
    } else {
        ExitStatus::Success
    }
}
