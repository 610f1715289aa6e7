//! What the inbox hands back: decisions, figures, events and stored interchanges, the same
//! whatever backend stores them.

use serde::Serialize;

use crate::standard::Standard;
use crate::status::Status;

/// What the inbox decided for one interchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The key was new: the interchange, its messages and their outbox events were written.
    New { interchange_id: i64 },
    /// The key was there with the same payload hash: nothing written but the sighting (the
    /// `sightings` row of that id).
    Duplicate { sighting_id: i64 },
    /// The key was there with another payload hash: nothing applied; the bytes are kept in the
    /// `sightings` row of that id.
    Drift {
        stored_sha256: String,
        sighting_id: i64,
    },
    /// The inbox cannot store it (a PostgreSQL server refusing a key too long for its index,
    /// say): nothing applied, and it is reported as rejected.
    Unstorable { reason: String },
    /// One of the operator's side effects failed on its data (`--effects`): nothing of it
    /// applied, and it is kept whole, with the reason, for `reapply --refused`.
    Refused(Refusal),
}

impl Decision {
    /// The row that records this sighting of the key, where one does: the interchange for the
    /// first (new), a `sightings` row for a duplicate or drift.
    pub fn sighting_row(&self) -> Option<SightingRow> {
        match self {
            Decision::New { interchange_id } => Some(SightingRow::Interchange(*interchange_id)),
            Decision::Duplicate { sighting_id } | Decision::Drift { sighting_id, .. } => {
                Some(SightingRow::Sighting(*sighting_id))
            }
            Decision::Unstorable { .. } | Decision::Refused(_) => None,
        }
    }
}

/// The row that records one sighting of a key (issue 40, item 3): where its file is said to
/// have been moved once it was ([`crate::inbox::Decisions::record_moves`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SightingRow {
    /// `interchanges`, by id: the first sighting, which was new.
    Interchange(i64),
    /// `sightings`, by id: a duplicate or a drift.
    Sighting(i64),
}

/// Why the operator's side effect refused an interchange: the statement, the message it ran
/// for, and the database's own code and words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The file and statement number (`INVOIC.sql statement 2`).
    pub statement: String,
    /// UNH 0062 of the message it ran for; `None` for `_interchange.sql`.
    pub message_ref: Option<String>,
    /// SQLite's extended result code name, or PostgreSQL's SQLSTATE.
    pub code: String,
    pub error: String,
    /// How many times this key with this content was refused, this time included.
    pub times_seen: i64,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.statement)?;
        if let Some(m) = &self.message_ref {
            write!(f, " for message {m}")?;
        }
        write!(f, " failed: {} ({})", self.error, self.code)
    }
}

/// A refused interchange as the inbox keeps it, for `reapply --refused`.
#[derive(Debug, Clone)]
pub struct KeptRefusal {
    pub id: i64,
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
    /// The file or delivery it came in last.
    pub source_file: String,
    /// Its bytes as received, UNA (if any) to UNZ.
    pub raw: Vec<u8>,
    /// The standard of its key: which reader reads `raw` again.
    pub standard: Standard,
}

/// Which applied messages `reapply --applied` runs the side effects again for.
#[derive(Debug, Clone)]
pub struct ReapplyFilter {
    /// UNH S009/0065.
    pub message_type: String,
    /// Only interchanges received at or after this time (RFC 3339 UTC).
    pub since: Option<String>,
    /// Only messages whose recorded mapping is not the one installed now.
    pub changed: bool,
}

/// One applied message the side effects ran again for.
#[derive(Debug, Clone)]
pub struct Reapplied {
    pub interchange_id: i64,
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
    pub message_ref: String,
    pub source_file: String,
    /// Where a statement failed on its data: that message's statements rolled back alone.
    pub failure: Option<Refusal>,
}

/// A batch of `reapply --applied`: the last interchange looked at (`None` when none was left),
/// and each message run again.
#[derive(Debug, Clone, Default)]
pub struct ReapplyBatch {
    pub last: Option<i64>,
    pub messages: Vec<Reapplied>,
}

/// A rejected file's record, which its errors point at.
#[derive(Debug, Clone)]
pub struct RejectedFile {
    pub(crate) id: i64,
    pub(crate) sha256: String,
    pub(crate) size: usize,
    /// The same bytes of the same sending (a file by its name without its folder, a delivery
    /// by its name) were recorded before: read again by us (a file seen again before its move
    /// or reprocessed unchanged, another host's copy, a broker's redelivery), so its rejection
    /// was answered then and is not answered again.
    pub(crate) seen_before: bool,
}

/// The figures `stats` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub inbox: i64,
    pub interchanges: i64,
    pub messages: i64,
    pub duplicates: i64,
    pub drift: i64,
    pub rejected: i64,
    /// Interchanges the operator's side effects refused, kept and not yet applied
    /// (`reapply --refused`).
    pub refused: i64,
    /// Events not yet published and still tried (of both outboxes).
    pub outbox_unpublished: i64,
    /// Events parked after `--max-attempts` failed attempts: no longer tried.
    pub outbox_failed: i64,
    /// How long the oldest unpublished (not parked) event has waited, in whole seconds.
    pub outbox_oldest_unpublished_age_seconds: Option<i64>,
    /// The same figures for each kind of event.
    pub outbox_kinds: OutboxKinds,
    pub oldest_entry: Option<String>,
    pub newest_entry: Option<String>,
    /// The answers the inbox holds (built with their decisions, to be delivered), by the
    /// document they are: always these four, in this order ([`AcknowledgementFigures::of`]).
    pub acknowledgements: Vec<AcknowledgementFigures>,
}

/// The answers of one kind the inbox holds: EDIFACT's `CONTRL`, X12's `TA1`, `997` and `999`,
/// positive and negative (a CONTRL's UCI 0083 `4`, an X12 answer whose TA1 rejects, TA104 `R`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AcknowledgementFigures {
    pub standard: Standard,
    pub kind: &'static str,
    pub positive: i64,
    pub negative: i64,
}

/// One group of stored answers as a backend counts them: the standard, the type of the event
/// that delivers them (`edifact.CONTRL.outbound`, `x12.997.outbound`, `x12.TA1.outbound` for a
/// TA1 alone), whether they are negative, whether a TA1 stands after their ISA, and how many.
pub struct AcknowledgementRow {
    pub standard: Standard,
    pub event_type: Option<String>,
    pub negative: bool,
    pub with_ta1: bool,
    pub count: i64,
}

impl AcknowledgementFigures {
    /// The kinds, in the order `stats` shows them.
    pub const KINDS: [(Standard, &'static str); 4] = [
        (Standard::Edifact, "CONTRL"),
        (Standard::X12, "TA1"),
        (Standard::X12, "997"),
        (Standard::X12, "999"),
    ];

    /// The figures of each kind from a backend's rows. An X12 answer counts under each
    /// document it holds: its TA1, and the 997 or 999 its event names (an answer with groups of
    /// both versions is named by its last: counted there).
    pub fn of(rows: impl IntoIterator<Item = AcknowledgementRow>) -> Vec<AcknowledgementFigures> {
        let mut figures: Vec<AcknowledgementFigures> = Self::KINDS
            .iter()
            .map(|&(standard, kind)| AcknowledgementFigures {
                standard,
                kind,
                positive: 0,
                negative: 0,
            })
            .collect();
        for row in rows {
            let named = row
                .event_type
                .as_deref()
                .and_then(|t| t.split('.').nth(1))
                .unwrap_or("");
            let mut kinds = vec![named];
            if row.with_ta1 && named != "TA1" {
                kinds.push("TA1");
            }
            for kind in kinds {
                if let Some(f) = figures
                    .iter_mut()
                    .find(|f| f.standard == row.standard && f.kind == kind)
                {
                    *(if row.negative {
                        &mut f.negative
                    } else {
                        &mut f.positive
                    }) += row.count;
                }
            }
        }
        figures
    }
}

/// The outbox figures of one kind of event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutboxFigures {
    pub unpublished: i64,
    pub failed: i64,
    pub oldest_unpublished_age_seconds: Option<i64>,
}

/// The outbox figures by kind: the received messages' events (`outbox`) and the CONTRLs to
/// deliver (`contrl_outbox`), which the alerts on a backlog must see as well.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutboxKinds {
    pub message: OutboxFigures,
    pub contrl: OutboxFigures,
}

impl OutboxKinds {
    /// Each kind with its name, as metrics label them.
    pub fn each(&self) -> [(&'static str, OutboxFigures); 2] {
        [("message", self.message), ("contrl", self.contrl)]
    }
}

impl Stats {
    /// Sets the outbox figures of each kind, and their totals.
    pub fn set_outboxes(&mut self, kinds: OutboxKinds) {
        let all = kinds.each();
        self.outbox_unpublished = all.iter().map(|(_, f)| f.unpublished).sum();
        self.outbox_failed = all.iter().map(|(_, f)| f.failed).sum();
        self.outbox_oldest_unpublished_age_seconds = all
            .iter()
            .filter_map(|(_, f)| f.oldest_unpublished_age_seconds)
            .max();
        self.outbox_kinds = kinds;
    }
}

/// One line of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub time: String,
    pub status: Status,
    pub file: String,
    pub sender: Option<String>,
    pub recipient: Option<String>,
    pub control_ref: Option<String>,
    /// The standard of the key (`edifact`, `x12`); `None` for a rejected file where no header
    /// was read.
    pub standard: Option<Standard>,
    /// For a rejected file: its first error (the lowest byte offset).
    pub error: Option<String>,
    /// For a rejected file: how many errors it has.
    pub errors: Option<i64>,
    /// For a refused interchange: its refusal's id, which `reapply --refused --id` takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal_id: Option<i64>,
    /// The message types (UNH 0065) of the interchange, each once, in order: of the copy
    /// accepted under the key for a duplicate or drift; of the one message for a parked event
    /// (`CONTRL` for a CONTRL's); empty where none was stored (rejected, refused).
    pub message_types: Vec<String>,
    /// How many messages that interchange has (1 for a parked event); `None` as above.
    pub messages: Option<i64>,
    /// For a parked event: its id in its outbox, which `publish --retry-parked --id` takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<i64>,
    /// For a parked event: its outbox, `message` or `contrl` (`publish --kind`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_kind: Option<&'static str>,
    /// For a sighting (new, duplicate, drift): where its file was read from, who decided it,
    /// where it went.
    #[serde(flatten)]
    pub filed: Filed,
    /// For a rejected file: the text at its (first listed) error's byte, from the bytes kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quote: Option<crate::edifact::quote::Quote>,
}

impl Event {
    /// The quote of a rejection from a window of its file's bytes and the error's offset in
    /// that window (as the backends read them: a few hundred bytes around the byte, not the
    /// whole file).
    pub fn quote_of(
        at: Option<i64>,
        window: Option<Vec<u8>>,
    ) -> Option<crate::edifact::quote::Quote> {
        let at = usize::try_from(at?).ok()?;
        let window = window?;
        (at <= window.len())
            .then(|| crate::envelopes::quote_at(&window, at))
            .flatten()
    }
}

/// The outbox a parked event is in, by the `send` column only a CONTRL's event has.
pub fn event_kind(status: crate::status::Status, send: Option<i64>) -> Option<&'static str> {
    (status == crate::status::Status::Failed).then_some(if send.is_some() {
        "contrl"
    } else {
        "message"
    })
}

/// What `list` asks for. The times are RFC 3339 UTC, compared as text with the stored times
/// (same format).
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub status: Option<Status>,
    pub sender: Option<String>,
    pub recipient: Option<String>,
    pub control_ref: Option<String>,
    /// UNH 0065: an interchange holding a message of this type.
    pub message_type: Option<String>,
    /// The standard of the event's key (a rejected file whose envelope was not read has none).
    pub standard: Option<Standard>,
    /// The file as listed, or its name in any folder.
    pub file: Option<String>,
    /// At or after.
    pub since: Option<String>,
    /// Before.
    pub until: Option<String>,
    pub limit: u32,
    pub offset: u32,
}

impl Event {
    /// `message_types` from the database's list joined by commas (in no order, maybe
    /// repeated).
    pub(crate) fn types_of(joined: Option<String>) -> Vec<String> {
        let mut types: Vec<String> = joined
            .unwrap_or_default()
            .split(',')
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        types.sort_unstable();
        types.dedup();
        types
    }
}

/// A CONTRL sent (stored to be delivered), as `list --contrl` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct SentContrl {
    /// When it was made (in the transaction that decided what it answers).
    pub time: String,
    /// Who it goes to: the answered interchange's sender, with its qualifier (0004:0007).
    pub partner: String,
    /// The answered interchange's key.
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
    /// The CONTRL's own control reference.
    pub own_ref: String,
    /// UCI 0083: `7` acknowledged, `8` received, `4` rejected; for an X12 answer TA104 `A`
    /// accepted or `R` rejected (the digits and the letters never meet).
    pub action: String,
    /// 0085, where rejected; for X12, TA105.
    pub error_code: Option<String>,
    /// When its last sending was delivered by `publish`; `None` while it waits or is parked.
    pub published_at: Option<String>,
    /// When `publish` parked its last sending; `None` unless parked.
    pub failed_at: Option<String>,
}

impl SentContrl {
    /// Positive (acknowledged, received, accepted) or negative (rejected: a CONTRL's `4`, an
    /// X12 answer's `R`).
    pub fn positive(&self) -> bool {
        !matches!(self.action.as_str(), "4" | "R")
    }
}

/// One line of `stats --by`: the volumes of one day and one sender, recipient or type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Volume {
    /// The day, UTC (`2026-11-29`).
    pub day: String,
    /// The sender, recipient or message type.
    pub key: String,
    /// Interchanges accepted (new); for a type, those holding a message of it.
    pub interchanges: i64,
    /// Messages accepted; for a type, its messages.
    pub messages: i64,
    /// Duplicates and drift seen (sightings still kept; purge deletes them with the window);
    /// `None` by message type (a sighting's messages are not read).
    pub duplicates: Option<i64>,
    pub drift: Option<i64>,
    /// Rejected interchanges whose UNB was read (their errors counted once per interchange);
    /// `None` by message type.
    pub rejected: Option<i64>,
}

/// One figure of a [`Volume`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Interchanges,
    Messages,
    Duplicates,
    Drift,
    Rejected,
}

/// The volumes being counted, by day then key: each backend's queries add to them.
#[derive(Debug)]
pub(crate) struct Volumes {
    rows: std::collections::BTreeMap<(String, String), Volume>,
    by: VolumeBy,
    /// Whether sightings and rejections are counted (not by message type).
    all: bool,
}

impl Volumes {
    pub(crate) fn new(by: VolumeBy) -> Volumes {
        Volumes {
            rows: Default::default(),
            by,
            all: by != VolumeBy::MessageType,
        }
    }

    fn add(&mut self, day: String, key: String, figure: Figure, n: i64) {
        let all = self.all.then_some(0);
        let v = self
            .rows
            .entry((day.clone(), key.clone()))
            .or_insert_with(|| Volume {
                day,
                key,
                duplicates: all,
                drift: all,
                rejected: all,
                ..Volume::default()
            });
        let add = |f: &mut Option<i64>| *f = Some(f.unwrap_or(0) + n);
        match figure {
            Figure::Interchanges => v.interchanges += n,
            Figure::Messages => v.messages += n,
            Figure::Duplicates => add(&mut v.duplicates),
            Figure::Drift => add(&mut v.drift),
            Figure::Rejected => add(&mut v.rejected),
        }
    }

    pub(crate) fn into_rows(self) -> Vec<Volume> {
        self.rows.into_values().collect()
    }

    /// Adds a row of a backend's volume query (see `VOLUMES` in each backend's reports.rs):
    /// what it counts (`interchanges`, `messages`, `interchanges of type`, a sighting's status,
    /// `rejected`), the day, the pair of partners and, for messages, their type. The pair's
    /// rows are summed for the partner `by` counts for.
    pub(crate) fn add_row(
        &mut self,
        what: &str,
        day: String,
        pair: (String, String),
        message_type: Option<String>,
        n: i64,
    ) {
        let by_type = !self.all;
        let figure = match what {
            "interchanges" if !by_type => Figure::Interchanges,
            "interchanges of type" if by_type => Figure::Interchanges,
            "messages" => Figure::Messages,
            "duplicate" if !by_type => Figure::Duplicates,
            "drift" if !by_type => Figure::Drift,
            "rejected" if !by_type => Figure::Rejected,
            _ => return,
        };
        let key = match (self.by, message_type) {
            (VolumeBy::Sender, _) => pair.0,
            (VolumeBy::Recipient, _) => pair.1,
            (VolumeBy::MessageType, Some(t)) => t,
            (VolumeBy::MessageType, None) => return,
        };
        self.add(day, key, figure, n);
    }
}

/// What `stats --by` counts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeBy {
    Sender,
    Recipient,
    MessageType,
}

/// A stored interchange, as `show` prints it. JSON names are those of `inspect --json` for the
/// same things.
#[derive(Debug, Clone, Serialize)]
pub struct StoredInterchange {
    pub id: i64,
    pub sender: String,
    pub sender_qualifier: Option<String>,
    pub recipient: String,
    pub recipient_qualifier: Option<String>,
    pub control_ref: String,
    /// The standard of its key (`edifact`, `x12`).
    pub standard: Standard,
    pub syntax: String,
    pub date: String,
    pub time: String,
    /// UNB 0035 is `1`.
    pub test: bool,
    pub application_ref: Option<String>,
    pub sha256: String,
    #[serde(rename = "file")]
    pub source_file: String,
    pub received_at: String,
    #[serde(flatten)]
    pub filed: Filed,
    /// True while the inbox holds this copy's key (not purged).
    pub in_inbox: bool,
    pub messages: Vec<StoredMessage>,
    /// The interchange's bytes as they stood in the file (decompressed).
    #[serde(skip)]
    pub raw: Vec<u8>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoredMessage {
    #[serde(rename = "ref")]
    pub reference: String,
    #[serde(rename = "type")]
    pub message_type: String,
    pub version: String,
    pub release: String,
    pub agency: String,
    pub segments: i64,
    #[serde(rename = "group")]
    pub group_ref: Option<String>,
    pub outbox_published_at: Option<String>,
}

/// A later sighting of a key.
#[derive(Debug, Clone, Serialize)]
pub struct Sighting {
    pub status: Status,
    pub sha256: String,
    pub stored_sha256: String,
    #[serde(rename = "file")]
    pub source_file: String,
    pub seen_at: String,
    #[serde(flatten)]
    pub filed: Filed,
}

/// Where a sighting was read from, who decided it, and where its file went (issue 40, item 3);
/// each `None` where not known: a broker's delivery has no path and is not moved, a file left
/// in place (no `--archive`, moved by no one, or a run that stopped between its commit and
/// the record of its move) has no `moved_to`, and rows from before edi-inbox kept them have
/// none at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Filed {
    /// The absolute path the file was read from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    /// The host (its name, as `uname -n` says it) that decided it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Where it was moved after the commit: the archive or the quarantine, with the suffix the
    /// move gave it (`inv.1.edi`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
}

/// A copy of a key that was not applied because its content differs from the applied one
/// (drift), kept whole: what `show --diff` sets beside the applied copy.
#[derive(Debug, Clone, Serialize)]
pub struct DriftedCopy {
    pub sha256: String,
    /// The hash of the applied copy it was compared with.
    pub stored_sha256: String,
    #[serde(rename = "file")]
    pub source_file: String,
    pub seen_at: String,
    #[serde(skip)]
    pub payload: Vec<u8>,
}

/// A refusal of the side effects kept under a key, as `show` says it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredRefusal {
    /// Its id, which `reapply --refused --id` takes.
    pub id: i64,
    pub sha256: String,
    #[serde(rename = "file")]
    pub source_file: String,
    #[serde(flatten)]
    pub refusal: Refusal,
    pub first_seen_at: String,
    pub last_seen_at: String,
    /// When `reapply` decided it again, and how (`new`, `duplicate`, `drift`); `None` while kept.
    pub resolved_at: Option<String>,
    pub resolved_as: Option<String>,
}

/// A rejected interchange whose UNB was read, kept under its key, as `show` says it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredRejection {
    /// The error (the first of the interchange, where it has more).
    pub error: String,
    /// The error's short name.
    pub kind: String,
    /// Where in the file.
    pub byte_offset: i64,
    #[serde(rename = "file")]
    pub source_file: String,
    /// The file's sha256.
    pub file_sha256: String,
    pub file_size: i64,
    /// True where only the start of the file was kept.
    pub truncated: bool,
    pub first_seen_at: String,
    pub last_seen_at: String,
    pub times_seen: i64,
    /// The file's bytes as kept.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// Everything stored under one key: the accepted copies (more than one only where the key was
/// purged and delivered again) and every later sighting.
#[derive(Debug, Clone, Serialize)]
pub struct KeyHistory {
    pub interchanges: Vec<StoredInterchange>,
    pub sightings: Vec<Sighting>,
    /// Refusals of the side effects (`--effects`) under the key, kept or resolved.
    pub refusals: Vec<StoredRefusal>,
    /// Rejections of an interchange under the key (its UNB read, something after it broken).
    pub rejections: Vec<StoredRejection>,
}

impl KeyHistory {
    /// True where nothing at all is stored under the key.
    pub fn is_empty(&self) -> bool {
        self.interchanges.is_empty()
            && self.sightings.is_empty()
            && self.refusals.is_empty()
            && self.rejections.is_empty()
    }
}

/// Which table a purge step deletes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeTarget {
    Inbox,
    Sightings,
    Rejections,
    /// The log of deliveries taken from a broker.
    Deliveries,
    /// The messages a transport named (AS4's and AS2's message ids), with their answers.
    TransportMessages,
    /// The negative answers of refused messages queued for delivery apart (AS2's asynchronous
    /// MDNs of refusals), by when they were queued.
    RefusedAnswers,
}

/// A CONTRL to store in the open batch: the key it answers, what it says, and how to build its
/// bytes once the backend has allocated its own control reference.
pub struct NewAcknowledgement<'a> {
    /// The answered interchange's standard, of its key.
    pub standard: crate::standard::Standard,
    pub sender: &'a str,
    pub recipient: &'a str,
    pub control_ref: &'a str,
    /// Whose counter gives the control reference: the answered sender with its qualifier.
    pub partner: &'a str,
    /// UCI 0083.
    pub action: &'a str,
    /// 0085, where rejected.
    pub error_code: Option<&'a str>,
    /// The CONTRL interchange under a control reference.
    pub build: &'a dyn Fn(&str) -> Vec<u8>,
    pub created_at: &'a str,
    /// The partner's sending it answers: the file's name, or the broker's name for the delivery.
    pub sending: &'a str,
    /// The CONTRL's own syntax version (its UNB 0002): `4` for a CONTRL:4:1, else CONTRL:D:3;
    /// an X12 answer's ISA12.
    pub syntax_version: &'a str,
    /// Its event's type: `edifact.CONTRL.outbound`, or for X12 `x12.997.outbound`,
    /// `x12.999.outbound` or `x12.TA1.outbound` (the answer's last kind: a 997 or 999 where it
    /// holds one beside a TA1).
    pub event_type: &'a str,
}

/// What became of a duplicate's CONTRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resend {
    /// Queued again, under this control reference: the partner sent the interchange again.
    Queued(String),
    /// Already sent for this sending (our own redelivery: a crash between the commit and the
    /// move or acknowledgement, a broker's redelivery, another host's copy): not again.
    AlreadySent,
    /// No CONTRL answered the key yet.
    Unanswered,
}

/// A stored CONTRL, as `show` prints it and a redelivery repeats it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredAcknowledgement {
    pub own_ref: String,
    pub action: String,
    pub error_code: Option<String>,
    pub created_at: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// Which outbox a publisher marks: the messages' events, or the CONTRLs'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbox {
    Messages,
    Acknowledgements,
}

impl Outbox {
    pub fn table(self) -> &'static str {
        match self {
            Outbox::Messages => "outbox",
            Outbox::Acknowledgements => "contrl_outbox",
        }
    }
}

/// A CONTRL to deliver, as a publisher claims it.
#[derive(Debug, Clone)]
pub struct ContrlEvent {
    /// The `contrl_outbox` row: for marking it.
    pub row: i64,
    pub event_type: String,
    pub created_at: String,
    pub attempts: i64,
    /// Which sending of the acknowledgement this is (1, then 2... for redeliveries answered).
    pub send: i64,
    /// The CONTRL's own sender and recipient (the answered interchange's recipient and sender).
    pub sender: String,
    pub recipient: String,
    /// The partner's counter it was numbered by.
    pub partner: String,
    /// The CONTRL's own 0020.
    pub own_ref: String,
    /// The answered interchange's 0020.
    pub control_ref: String,
    pub bytes: Vec<u8>,
    /// The CONTRL's own syntax version (its UNB 0002), as stored with it.
    pub syntax_version: String,
}

/// A delivery `consume` took from a broker, recorded in the batch that decides it.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryRecord<'a> {
    /// The broker's identity for it (`STREAM/SEQUENCE`, `QUEUE/MESSAGE-ID`): the source its
    /// interchanges, sightings and rejections are recorded under.
    pub source: &'a str,
    /// The `edi-filename` header, where it carried one.
    pub filename: Option<&'a str>,
    /// How many times the broker has delivered it, this time included.
    pub delivery_count: u32,
    pub size: usize,
    /// A Kafka record's key (shown escaped where it is not UTF-8).
    pub key: Option<&'a str>,
    /// When its producer (or the broker) says it was produced, RFC 3339 UTC.
    pub produced_at: Option<&'a str>,
}

/// What the events of one interchange share of its envelope (UNB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventEnvelope {
    /// The standard its interchange is in: its events' content type.
    pub standard: Standard,
    /// 0004
    pub sender: String,
    /// S002/0007
    pub sender_qualifier: Option<String>,
    /// 0010
    pub recipient: String,
    /// S003/0007
    pub recipient_qualifier: Option<String>,
    /// 0020
    pub control_ref: String,
    /// S001/0001
    pub syntax_id: String,
    /// S001/0002
    pub syntax_version: String,
}

/// An outbox event as a publisher claims it: what identifies it, and its message's place in
/// its interchange's bytes.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    /// The row's id: for marking it, never sent (it differs between inboxes).
    pub row: i64,
    pub event_type: String,
    pub created_at: String,
    pub attempts: i64,
    pub interchange_id: i64,
    /// Its interchange's, shared by the interchange's events (read once for them all).
    pub envelope: std::sync::Arc<EventEnvelope>,
    pub group_ref: Option<String>,
    pub message_ref: String,
    pub message_type: String,
    pub version: String,
    pub release: String,
    pub agency: String,
    pub raw_start: usize,
    pub raw_end: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        standard: Standard,
        event: &str,
        negative: bool,
        with_ta1: bool,
        count: i64,
    ) -> AcknowledgementRow {
        AcknowledgementRow {
            standard,
            event_type: Some(event.to_string()),
            negative,
            with_ta1,
            count,
        }
    }

    #[test]
    fn answers_count_under_each_document_they_hold() {
        let figures = AcknowledgementFigures::of([
            row(
                Standard::Edifact,
                "edifact.CONTRL.outbound",
                false,
                false,
                3,
            ),
            row(Standard::Edifact, "edifact.CONTRL.outbound", true, false, 2),
            // A TA1 alone, rejecting; a TA1 with a 997, rejecting; a 999 with a TA1 accepting.
            row(Standard::X12, "x12.TA1.outbound", true, true, 4),
            row(Standard::X12, "x12.997.outbound", true, true, 5),
            row(Standard::X12, "x12.999.outbound", false, true, 6),
            // A 997 alone, accepting.
            row(Standard::X12, "x12.997.outbound", false, false, 7),
        ]);
        let got: Vec<(&str, i64, i64)> = figures
            .iter()
            .map(|f| (f.kind, f.positive, f.negative))
            .collect();
        assert_eq!(
            got,
            [
                ("CONTRL", 3, 2),
                ("TA1", 6, 9),
                ("997", 7, 5),
                ("999", 6, 0)
            ]
        );
        assert_eq!(
            AcknowledgementFigures::of([]).len(),
            4,
            "every kind is there, at 0, for the metrics' labels to stay the same"
        );
    }
}
