//! What happened to one input's interchange (or to the input as a whole), with where it came
//! from: the line `ingest` and `consume` print, in its human and its JSON form.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::edifact::Interchange;
use crate::edifact::quote::Quote;
use crate::inbox::{Decision, Refusal, SightingRow};
use crate::output::{SHOWN_NAME_CHARS, count, shortened};
use crate::standard::Standard;
use crate::status::Status;

/// Where an input came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file, by the name it is shown under.
    File(String),
    /// A broker's delivery, by the broker's name for it (`nats:STREAM/SEQUENCE`, ...), with its
    /// `edi-filename` header and how many times the broker delivered it, this time included.
    Delivery {
        name: String,
        filename: Option<String>,
        delivery_count: u32,
        /// Its name is this delivery's alone, not the message's (RabbitMQ's for a message
        /// without a `message_id`): a redelivery of it comes under another name.
        named_per_delivery: bool,
    },
}

impl Source {
    /// The name it is recorded and reported under.
    pub fn name(&self) -> &str {
        match self {
            Source::File(name) | Source::Delivery { name, .. } => name,
        }
    }
}

/// The key and figures of an interchange the inbox decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// New, duplicate or drift.
    pub status: Status,
    /// The standard of its key.
    pub standard: Standard,
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
    pub messages: usize,
    pub sha256: String,
    /// For drift: the hash of the copy accepted first.
    pub stored_sha256: Option<String>,
    /// UNG 0048 of each group that holds no message (accepted beside groups that do, and
    /// answered 0085 32 on a UCF of its own where a CONTRL acknowledges the interchange).
    pub empty_groups: Vec<String>,
    /// Where the interchange starts in its input (its UNA or UNB).
    pub offset: usize,
    /// For refused: why the operator's side effect refused it (boxed: most outcomes have none).
    pub refusal: Option<Box<Refusal>>,
    /// The row that records this sighting (the interchange, or its sightings row), for where
    /// its file is moved; `None` for a refusal.
    pub row: Option<SightingRow>,
}

/// The key of a rejected interchange whose header was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedKey {
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
    pub standard: Standard,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The inbox decided an interchange: new, duplicate or drift.
    Decided(Decided),
    /// Input rejected, with its reason and, where a byte is concerned, its offset.
    Rejected {
        error: String,
        offset: Option<usize>,
        /// The input's text at the offset, where its bytes were at hand (boxed: most outcomes
        /// have none).
        quote: Option<Box<Quote>>,
        /// The key of the interchange rejected, where its reader read its header (UNB, ISA):
        /// the key its rejection is kept under, with its standard.
        key: Option<Box<RejectedKey>>,
    },
    /// An input left in place, with the reason (too young, changed while read).
    Skipped { reason: String },
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub source: Source,
    pub event: Event,
    /// The control reference (0020) of the CONTRL queued for it, where one was.
    pub contrl: Option<String>,
}

impl Outcome {
    pub fn new(source: Source, event: Event) -> Outcome {
        Outcome {
            source,
            event,
            contrl: None,
        }
    }

    /// What the inbox decided for `i`; a refusal of the inbox (a value it cannot store) is a
    /// rejection.
    pub fn decided(source: Source, i: &Interchange<'_>, decision: &Decision) -> Outcome {
        let mut refusal = None;
        let (status, stored_sha256) = match decision {
            Decision::New { .. } => (Status::New, None),
            Decision::Duplicate { .. } => (Status::Duplicate, None),
            Decision::Drift { stored_sha256, .. } => (Status::Drift, Some(stored_sha256.clone())),
            Decision::Refused(r) => {
                refusal = Some(Box::new(r.clone()));
                (Status::Refused, None)
            }
            Decision::Unstorable { reason } => {
                let what = format!(
                    "interchange {} from {}: {reason}",
                    i.unb.control_ref, i.unb.sender
                );
                return Outcome::rejected(source, what, Some(i.offset));
            }
        };
        Outcome::new(
            source,
            Event::Decided(Decided {
                status,
                standard: i.standard,
                sender: i.unb.sender.to_string(),
                recipient: i.unb.recipient.to_string(),
                control_ref: i.unb.control_ref.to_string(),
                messages: i.messages.len(),
                sha256: i.sha256_hex(),
                stored_sha256,
                empty_groups: i.empty_groups().map(|g| g.reference.to_string()).collect(),
                offset: i.offset,
                refusal,
                row: decision.sighting_row(),
            }),
        )
    }

    pub fn rejected(source: Source, error: String, offset: Option<usize>) -> Outcome {
        Outcome::new(
            source,
            Event::Rejected {
                error,
                offset,
                quote: None,
                key: None,
            },
        )
    }

    /// The same, with the key of the interchange rejected, where its header was read.
    pub fn keyed(mut self, read: Option<crate::inbox::InterchangeKey<'_>>) -> Outcome {
        if let Event::Rejected { key, .. } = &mut self.event {
            *key = read.map(|k| {
                Box::new(RejectedKey {
                    sender: k.sender.to_string(),
                    recipient: k.recipient.to_string(),
                    control_ref: k.control_ref.to_string(),
                    standard: k.standard,
                })
            });
        }
        self
    }

    /// The same, with the text of `bytes` (the input the offset is of) quoted at the offset of
    /// a rejection.
    pub fn quoting(mut self, bytes: &[u8]) -> Outcome {
        if let Event::Rejected {
            offset: Some(at),
            quote,
            ..
        } = &mut self.event
        {
            *quote = crate::envelopes::quote_at(bytes, *at).map(Box::new);
        }
        self
    }

    /// The human line, and under a rejection the text at its offset with a `^` under the byte.
    pub fn human_lines(&self) -> Vec<String> {
        let mut lines = vec![self.human()];
        if let Event::Rejected { quote: Some(q), .. } = &self.event {
            lines.extend(q.lines(QUOTE_INDENT));
        }
        lines
    }

    pub fn skipped(source: Source, reason: String) -> Outcome {
        Outcome::new(source, Event::Skipped { reason })
    }

    pub fn status(&self) -> Status {
        match &self.event {
            Event::Decided(d) => d.status,
            Event::Rejected { .. } => Status::Rejected,
            Event::Skipped { .. } => Status::Skipped,
        }
    }

    /// A rejection's reason, with its byte where there is one (a dead letter carries it); a
    /// refusal's too.
    pub fn rejection(&self) -> Option<String> {
        match &self.event {
            Event::Decided(Decided {
                refusal: Some(r),
                offset,
                control_ref,
                sender,
                ..
            }) => Some(format!(
                "interchange {control_ref} from {sender} refused: {r} (byte {offset})"
            )),
            Event::Rejected {
                error,
                offset: Some(at),
                ..
            } => Some(format!("{error} (byte {at})")),
            Event::Rejected { error, .. } => Some(error.clone()),
            _ => None,
        }
    }

    /// The human line (not yet escaped: [`crate::output::Out::line`] escapes it).
    pub fn human(&self) -> String {
        let file = self.source.name();
        let mut line = match &self.event {
            Event::Decided(d) => {
                // An EDIFACT key as it always stood; another standard's said first (`X12 `).
                let standard = match d.standard {
                    Standard::Edifact => String::new(),
                    other => format!("{} ", other.as_str().to_uppercase()),
                };
                let mut key = format!(
                    "{standard}{} -> {}  ref {}  {}",
                    d.sender,
                    d.recipient,
                    d.control_ref,
                    count(d.messages as u64, "message", "messages")
                );
                // The answer to it, where one is due: a CONTRL, or an X12 interchange of ours
                // (a TA1, a 997 or 999) named by its ISA13.
                if let Some(r) = &self.contrl {
                    key = match d.standard {
                        Standard::Edifact => format!("{key}  CONTRL {r}"),
                        Standard::X12 => format!("{key}  answer ISA13 {r}"),
                    };
                }
                if let Some(groups) = empty_groups(&d.empty_groups) {
                    key = format!("{key}  ({groups})");
                }
                match d.status {
                    Status::Drift => format!(
                        "{}  {file}  {key}: same key, other content (sha256 {}, first accepted {}); NOT applied, kept for review",
                        d.status.label(),
                        d.sha256,
                        d.stored_sha256.as_deref().unwrap_or("")
                    ),
                    Status::Refused => format!(
                        "{}  {file}  {key}: {} (interchange at byte {}, refused {}); NOT applied, kept for reapply --refused",
                        d.status.label(),
                        d.refusal
                            .as_ref()
                            .map_or_else(String::new, ToString::to_string),
                        d.offset,
                        count(
                            d.refusal.as_ref().map_or(1, |r| r.times_seen) as u64,
                            "time",
                            "times"
                        ),
                    ),
                    _ => format!("{}  {file}  {key}", d.status.label()),
                }
            }
            Event::Rejected { error, .. } => {
                format!("{}  {file}  {error}", Status::Rejected.label())
            }
            Event::Skipped { reason } => format!("{}  {file}  {reason}", Status::Skipped.label()),
        };
        if let Source::Delivery {
            filename,
            delivery_count,
            ..
        } = &self.source
        {
            if let Some(f) = filename {
                line.push_str(&format!(
                    "  (edi-filename {})",
                    shortened(f, SHOWN_NAME_CHARS)
                ));
            }
            if *delivery_count > 1 {
                line.push_str(&format!("  (delivery {delivery_count})"));
            }
        }
        line
    }
}

/// The JSON line: `file`, `status`, then what the event has (`sender`, `recipient`,
/// `control_ref`, `standard`, `messages`, `sha256`, `stored_sha256`, `empty_groups`; or, for a
/// rejection, the key where its header was read, `error` and `offset`), then a
/// delivery's `filename` and `delivery_count`, and `contrl`: in that order, the absent left out.
impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(None)?;
        m.serialize_entry("file", self.source.name())?;
        m.serialize_entry("status", &self.status())?;
        match &self.event {
            Event::Decided(d) => {
                m.serialize_entry("sender", &d.sender)?;
                m.serialize_entry("recipient", &d.recipient)?;
                m.serialize_entry("control_ref", &d.control_ref)?;
                m.serialize_entry("standard", &d.standard)?;
                m.serialize_entry("messages", &d.messages)?;
                m.serialize_entry("sha256", &d.sha256)?;
                if let Some(s) = &d.stored_sha256 {
                    m.serialize_entry("stored_sha256", s)?;
                }
                if !d.empty_groups.is_empty() {
                    m.serialize_entry("empty_groups", &d.empty_groups)?;
                }
                if let Some(r) = &d.refusal {
                    m.serialize_entry("error", &r.to_string())?;
                    m.serialize_entry("offset", &d.offset)?;
                    m.serialize_entry("refusal", r)?;
                }
            }
            Event::Rejected {
                error,
                offset,
                quote,
                key,
            } => {
                if let Some(k) = key {
                    m.serialize_entry("sender", &k.sender)?;
                    m.serialize_entry("recipient", &k.recipient)?;
                    m.serialize_entry("control_ref", &k.control_ref)?;
                    m.serialize_entry("standard", &k.standard)?;
                }
                m.serialize_entry("error", error)?;
                if let Some(at) = offset {
                    m.serialize_entry("offset", at)?;
                }
                if let Some(q) = quote {
                    m.serialize_entry("quote", q)?;
                }
            }
            Event::Skipped { reason } => m.serialize_entry("error", reason)?,
        }
        if let Source::Delivery {
            filename,
            delivery_count,
            ..
        } = &self.source
        {
            if let Some(f) = filename {
                m.serialize_entry("filename", f)?;
            }
            m.serialize_entry("delivery_count", delivery_count)?;
        }
        if let Some(c) = &self.contrl {
            m.serialize_entry("contrl", c)?;
        }
        m.end()
    }
}

/// The indent of a rejection's quote under its line.
const QUOTE_INDENT: &str = "           ";

/// How many empty groups a human line names; a count says the rest.
const SHOWN_GROUPS: usize = 5;

/// The empty groups of an interchange as its human line says them (`empty group G2: lower level
/// empty, 0085 32`), the first few by name; `None` where it has none.
fn empty_groups(groups: &[String]) -> Option<String> {
    let (first, rest) = groups.split_at(groups.len().min(SHOWN_GROUPS));
    let mut names: Vec<_> = first
        .iter()
        .map(|g| shortened(g, SHOWN_NAME_CHARS))
        .collect();
    if !rest.is_empty() {
        names.push(format!("and {} more", rest.len()).into());
    }
    let noun = if groups.len() == 1 { "group" } else { "groups" };
    (!groups.is_empty()).then(|| {
        format!(
            "empty {noun} {}: lower level empty, 0085 32",
            names.join(", ")
        )
    })
}

/// The counts of a run's summary line.
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub files: usize,
    pub new: usize,
    pub duplicate: usize,
    pub drift: usize,
    pub rejected: usize,
    pub refused: usize,
    pub skipped: usize,
}

impl Summary {
    pub fn count(&mut self, status: Status) {
        match status {
            Status::New => self.new += 1,
            Status::Duplicate => self.duplicate += 1,
            Status::Drift => self.drift += 1,
            Status::Rejected | Status::Failed => self.rejected += 1,
            Status::Refused => self.refused += 1,
            Status::Skipped => self.skipped += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(status: Status, stored: Option<&str>) -> Event {
        Event::Decided(Decided {
            status,
            standard: Standard::Edifact,
            sender: "S".into(),
            recipient: "R".into(),
            control_ref: "C1".into(),
            messages: 2,
            sha256: "ab".into(),
            stored_sha256: stored.map(String::from),
            empty_groups: Vec::new(),
            offset: 0,
            refusal: None,
            row: None,
        })
    }

    /// The JSON lines byte for byte as they were before `Outcome` was an enum: scripts and the
    /// tests read them.
    #[test]
    fn the_json_lines_are_pinned() {
        let file = || Source::File("drop/a.edi".into());
        let delivery = |filename: Option<&str>, n| Source::Delivery {
            name: "nats:EDI/7".into(),
            filename: filename.map(String::from),
            delivery_count: n,
            named_per_delivery: false,
        };
        let mut with_contrl = Outcome::new(file(), decided(Status::New, None));
        with_contrl.contrl = Some("00000000000001".into());
        let cases = [
            (
                Outcome::new(file(), decided(Status::New, None)),
                r#"{"file":"drop/a.edi","status":"new","sender":"S","recipient":"R","control_ref":"C1","standard":"edifact","messages":2,"sha256":"ab"}"#,
            ),
            (
                with_contrl,
                r#"{"file":"drop/a.edi","status":"new","sender":"S","recipient":"R","control_ref":"C1","standard":"edifact","messages":2,"sha256":"ab","contrl":"00000000000001"}"#,
            ),
            (
                Outcome::new(file(), decided(Status::Drift, Some("cd"))),
                r#"{"file":"drop/a.edi","status":"drift","sender":"S","recipient":"R","control_ref":"C1","standard":"edifact","messages":2,"sha256":"ab","stored_sha256":"cd"}"#,
            ),
            (
                Outcome::rejected(file(), "UNT at byte 118 counts 5".into(), Some(118)),
                r#"{"file":"drop/a.edi","status":"rejected","error":"UNT at byte 118 counts 5","offset":118}"#,
            ),
            (
                Outcome::rejected(file(), "permission denied".into(), None),
                r#"{"file":"drop/a.edi","status":"rejected","error":"permission denied"}"#,
            ),
            (
                Outcome::skipped(file(), "modified 4s ago".into()),
                r#"{"file":"drop/a.edi","status":"skipped","error":"modified 4s ago"}"#,
            ),
            (
                Outcome::new(delivery(Some("x.edi"), 2), decided(Status::Duplicate, None)),
                r#"{"file":"nats:EDI/7","status":"duplicate","sender":"S","recipient":"R","control_ref":"C1","standard":"edifact","messages":2,"sha256":"ab","filename":"x.edi","delivery_count":2}"#,
            ),
            (
                Outcome::rejected(delivery(None, 1), "bad".into(), Some(3)),
                r#"{"file":"nats:EDI/7","status":"rejected","error":"bad","offset":3,"delivery_count":1}"#,
            ),
        ];
        for (outcome, want) in cases {
            assert_eq!(serde_json::to_string(&outcome).unwrap(), want);
        }
    }

    #[test]
    fn the_human_lines() {
        let o = Outcome::new(
            Source::Delivery {
                name: "amqp:q/m1".into(),
                filename: Some("f.edi".into()),
                delivery_count: 3,
                named_per_delivery: false,
            },
            decided(Status::New, None),
        );
        assert_eq!(
            o.human(),
            "new        amqp:q/m1  S -> R  ref C1  2 messages  (edi-filename f.edi)  (delivery 3)"
        );
        let o = Outcome::rejected(Source::File("a".into()), "bad".into(), Some(4));
        assert_eq!(o.human(), "rejected   a  bad");
        assert_eq!(o.rejection().as_deref(), Some("bad (byte 4)"));
    }

    /// A rejected interchange whose header was read names its key and standard in the JSON,
    /// as a decided one does; one whose header was not read has none.
    #[test]
    fn a_rejection_names_the_key_its_header_gave() {
        let key = crate::inbox::InterchangeKey {
            standard: Standard::X12,
            sender: "S",
            recipient: "R",
            control_ref: "000000001",
        };
        let o =
            Outcome::rejected(Source::File("a.x12".into()), "bad".into(), Some(4)).keyed(Some(key));
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"file":"a.x12","status":"rejected","sender":"S","recipient":"R","control_ref":"000000001","standard":"x12","error":"bad","offset":4}"#
        );
        assert_eq!(
            o.human(),
            "rejected   a.x12  bad",
            "the human line as before"
        );
        let o = Outcome::rejected(Source::File("a".into()), "bad".into(), Some(4)).keyed(None);
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"file":"a","status":"rejected","error":"bad","offset":4}"#
        );
    }

    /// An X12 interchange's key says its standard: `X12 ` before it on the human line,
    /// `"standard":"x12"` in the JSON; an EDIFACT line has no prefix (above).
    #[test]
    fn an_x12_interchange_is_said_to_be_one() {
        let mut event = decided(Status::Duplicate, None);
        if let Event::Decided(d) = &mut event {
            d.standard = Standard::X12;
        }
        let o = Outcome::new(Source::File("a.x12".into()), event);
        assert_eq!(
            o.human(),
            "duplicate  a.x12  X12 S -> R  ref C1  2 messages"
        );
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"file":"a.x12","status":"duplicate","sender":"S","recipient":"R","control_ref":"C1","standard":"x12","messages":2,"sha256":"ab"}"#
        );
    }

    /// An accepted interchange's empty groups are named on its line, the first five of them,
    /// and listed whole in its JSON.
    #[test]
    fn empty_groups_are_named() {
        let with = |groups: &[&str]| {
            let mut event = decided(Status::New, None);
            if let Event::Decided(d) = &mut event {
                d.empty_groups = groups.iter().map(|g| g.to_string()).collect();
            }
            let mut o = Outcome::new(Source::File("a.edi".into()), event);
            o.contrl = Some("00000000000001".into());
            o
        };
        let o = with(&["G2"]);
        assert_eq!(
            o.human(),
            "new        a.edi  S -> R  ref C1  2 messages  CONTRL 00000000000001  (empty group G2: lower level empty, 0085 32)"
        );
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"file":"a.edi","status":"new","sender":"S","recipient":"R","control_ref":"C1","standard":"edifact","messages":2,"sha256":"ab","empty_groups":["G2"],"contrl":"00000000000001"}"#
        );
        let names: Vec<String> = (1..=7).map(|n| format!("E{n}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(
            with(&names).human().ends_with(
                "(empty groups E1, E2, E3, E4, E5, and 2 more: lower level empty, 0085 32)"
            ),
            "{}",
            with(&names).human()
        );
    }

    /// A name of any length (a delivery's edi-filename) is shortened on the human line, and
    /// kept whole in the JSON.
    #[test]
    fn a_long_file_name_is_shortened_on_the_human_line_only() {
        let name = format!("{}.edi", "n".repeat(100_000));
        let o = Outcome::new(
            Source::Delivery {
                name: "nats:EDI/7".into(),
                filename: Some(name.clone()),
                delivery_count: 1,
                named_per_delivery: false,
            },
            decided(Status::New, None),
        );
        let line = o.human();
        assert!(line.len() < 400, "{} bytes: {}", line.len(), &line[..400]);
        assert!(
            line.ends_with(&format!(
                "  (edi-filename {}... (100004 bytes in all))",
                "n".repeat(SHOWN_NAME_CHARS)
            )),
            "{line}"
        );
        let json: serde_json::Value = serde_json::to_value(&o).unwrap();
        assert_eq!(json["filename"], name.as_str());
    }
}
