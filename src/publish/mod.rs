//! Delivering the outbox: what an event is on the wire (its stable id, its subject, its
//! CloudEvents attributes, its body) and the destinations that take it: NATS JetStream
//! (`nats.rs`), RabbitMQ (`amqp.rs`), Kafka (`kafka.rs`), Amazon SQS (`sqs.rs`) and a folder (`dir.rs`). The brokers' code is
//! asynchronous, on a current-thread runtime each destination keeps to itself; what it offers
//! the rest of the program is a blocking [`Sink::send`].
//!
//! Where a new thing goes: a new destination in a file of its name here, implementing
//! [`Destination`] and [`Sink`], with its line in the broker table (`crate::brokers`); its names for the CloudEvents
//! attributes, an `attr_binding!` in `attributes.rs`; what its broker shares with a source, in
//! `crate::broker`; the dead-letter publisher's choices, `dead_letter.rs`.

#[macro_use]
mod attributes;
#[cfg(feature = "amqp")]
pub(crate) mod amqp;
mod dead_letter;
pub(crate) mod dir;
#[cfg(feature = "kafka")]
pub(crate) mod kafka;
#[cfg(feature = "nats")]
pub(crate) mod nats;
#[cfg(feature = "sqs")]
pub(crate) mod sqs;

pub use dead_letter::{DeadLetter, Rejected};

pub use attributes::{Attr, Attributes};

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::inbox::OutboxEvent;

/// Where `publish --to` (or `consume --dead-letter`) sends, read by its module, with what that
/// kind of destination alone is given.
pub trait Destination: std::fmt::Debug + Send {
    /// For messages: never the password.
    fn shown(&self) -> String;

    /// The subjects' prefix the URL names, which `--subject`'s template starts with (and the
    /// subject itself, for a dead-letter destination).
    fn subject_prefix(&self) -> Option<&str> {
        None
    }

    /// The whole subject template, where the URL names it (a Kafka topic, `edifact.{type}`):
    /// it takes the place of `--subject`.
    fn subject_template(&self) -> Option<&str> {
        None
    }

    /// Takes what the run says to destinations of its kind.
    fn configure(&mut self, _settings: &DestinationSettings, _subjects: &Template) {}

    /// Connects (each wait bounded, and ended by `stop`).
    fn connect(&self, stop: &Stop) -> anyhow::Result<Box<dyn Sink>>;
}

/// What a run of `publish` says to the destinations of one kind, beside their URL (the command
/// makes it from its flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationSettings {
    /// NATS: the stream to create where none captures the subjects (`--create-stream`).
    pub create_stream: Option<String>,
    /// RabbitMQ: the durable topic exchange to publish to (`--exchange`).
    pub exchange: String,
}

/// Why a destination took no more of a batch: every sink says which, so that a run knows
/// whether trying again can help.
#[derive(Debug)]
pub enum SinkError {
    /// The destination cannot take any event as it is set up (no stream for the subjects): a
    /// run ends with exit 1 on it, `--follow` too, rather than retry what only an operator can
    /// fix.
    Setup(String),
    /// The destination went away, stalled or is full: nothing unconfirmed is marked, and the
    /// batch is sent again once it is back (with `--follow`, after a reconnect).
    Lost(anyhow::Error),
}

impl SinkError {
    /// The error, for a run that ends on it.
    pub fn into_error(self) -> anyhow::Error {
        match self {
            SinkError::Setup(text) => anyhow::anyhow!(text),
            SinkError::Lost(e) => e,
        }
    }
}

/// What is sent per event: each message (UNH..UNT), or each interchange once (UNA/UNB..UNZ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    Message,
    Interchange,
}

/// One message to send: one event, or (with `--payload interchange`) one interchange's events.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The stable id: the same whenever and from whichever host the event is published.
    pub id: String,
    /// The subject: for an event, `--subject`'s template, or the URL's where it names one
    /// ([`Destination::subject_template`]), filled in; for a dead letter, the URL's or the
    /// delivery's. Each destination's module says what its broker makes of it.
    pub subject: String,
    /// CloudEvents attributes (`specversion`, `id`, `source`, `type`, `time`, and the `edi...`
    /// extensions), which each destination names in its binding.
    pub attributes: Attributes,
    pub body: bytes::Bytes,
    /// The media type of `body`: its interchange's standard's ([`content_type`]).
    pub content_type: &'static str,
}

/// The media type of an EDIFACT body (RFC 1767).
pub const CONTENT_TYPE: &str = "application/EDIFACT";

/// The media type of an X12 body (RFC 1767).
pub const X12_CONTENT_TYPE: &str = "application/EDI-X12";

/// The media type of a body of `standard`.
pub fn content_type(standard: crate::standard::Standard) -> &'static str {
    match standard {
        crate::standard::Standard::Edifact => CONTENT_TYPE,
        crate::standard::Standard::X12 => X12_CONTENT_TYPE,
    }
}

/// What a destination said about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Stored: it may be marked published.
    Stored,
    /// The destination had it already, under the same id (a republish after a crash).
    Duplicate,
    /// Refused for this message alone (too large, no stream, unroutable, not permitted): tried
    /// again on a later run, parked after `--max-attempts`.
    Refused(String),
}

/// A destination, connected. `Send`, so that a batch is with the destination on a thread of its
/// own while the next is claimed (`publish`).
pub trait Sink: Send {
    /// Sends `batch` with the acknowledgements pipelined, and gives one answer per message in
    /// its order. An error means the connection failed: no answer is known for the messages
    /// without one, and none of them may be marked (`answers` holds those known before).
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>);

    /// Hands `batch` over, and returns its answers as [`Sink::send`] does, or `None` where the
    /// destination sends it on while the answers of a batch before come (Kafka): its answers
    /// then come from [`Sink::answers`], batch after batch in the order handed over.
    fn hand_over(&mut self, batch: Vec<Outgoing>) -> Option<(Vec<Answer>, Option<SinkError>)> {
        Some(self.send(batch))
    }

    /// The answers of the oldest batch handed over and not answered, as [`Sink::send`] gives
    /// them (a destination whose [`Sink::hand_over`] answers at once never has one).
    fn answers(&mut self) -> (Vec<Answer>, Option<SinkError>) {
        (
            Vec::new(),
            Some(SinkError::Lost(anyhow::anyhow!("no batch in flight"))),
        )
    }
}

/// Set by SIGTERM or SIGINT: a batch waiting on its destination gives up at once, with the
/// answers it has (nothing unconfirmed is marked).
pub type Stop = Option<std::sync::Arc<std::sync::atomic::AtomicBool>>;

/// True once a signal set `stop`.
pub fn stopped(stop: &Stop) -> bool {
    stop.as_ref()
        .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
}

/// `--subject`: a template of dot-separated tokens with `{type}`, `{sender}`, `{recipient}`,
/// `{version}`, `{release}` and `{standard}` (`edifact` or `x12`), each replaced by its value
/// escaped to one token.
#[derive(Debug, Clone)]
pub struct Template {
    tokens: Vec<String>,
}

const PLACEHOLDERS: [&str; 6] = [
    "{type}",
    "{sender}",
    "{recipient}",
    "{version}",
    "{release}",
    "{standard}",
];

impl Template {
    /// Reads a template, with the destination's prefix (if any) in front.
    pub fn parse(text: &str, prefix: Option<&str>) -> Result<Template, String> {
        let mut tokens: Vec<String> = prefix
            .into_iter()
            .flat_map(|p| p.split('.'))
            .map(str::to_string)
            .collect();
        for token in text.split('.') {
            let fixed = PLACEHOLDERS
                .iter()
                .fold(token.to_string(), |t, p| t.replace(p, ""));
            if token.is_empty() || !(fixed.is_empty() || is_plain_token(&fixed)) {
                return Err(format!(
                    "--subject {text:?}: each dot-separated part is letters, digits, - and _, or one of {}",
                    PLACEHOLDERS.join(", ")
                ));
            }
            tokens.push(token.to_string());
        }
        Ok(Template { tokens })
    }

    /// The subject of an event.
    pub fn render(&self, e: &OutboxEvent) -> String {
        self.render_values([
            &e.message_type,
            &e.envelope.sender,
            &e.envelope.recipient,
            &e.version,
            &e.release,
            e.envelope.standard.as_str(),
        ])
    }

    /// The subject for `{type}`, `{sender}`, `{recipient}`, `{version}`, `{release}` and
    /// `{standard}`.
    pub fn render_values(&self, values: [&str; 6]) -> String {
        let [message_type, sender, recipient, version, release, standard] = values;
        let mut subject = String::with_capacity(64);
        for (n, t) in self.tokens.iter().enumerate() {
            if n > 0 {
                subject.push('.');
            }
            if !t.contains('{') {
                subject.push_str(t);
                continue;
            }
            let mut token = t.clone();
            for (p, v) in [
                ("{type}", message_type),
                ("{sender}", sender),
                ("{recipient}", recipient),
                ("{version}", version),
                ("{release}", release),
                ("{standard}", standard),
            ] {
                if token.contains(p) {
                    token = token.replace(p, &subject_token(v));
                }
            }
            subject.push_str(&token);
        }
        subject
    }

    /// The subjects a stream must capture for every event: each part with a placeholder as
    /// `*`.
    pub fn wildcard(&self) -> String {
        self.tokens
            .iter()
            .map(|t| if t.contains('{') { "*" } else { t.as_str() })
            .collect::<Vec<_>>()
            .join(".")
    }
}

pub(crate) fn is_plain_token(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A value as one subject token: letters, digits, `-` and `_` as they are, every other byte
/// (`.` would split the subject, `*` and `>` widen it, a space break it; `:` and `%` for
/// clarity) as `%XX`, so that no sender can reach another's subject. Never empty.
pub fn subject_token(value: &str) -> String {
    if value.is_empty() {
        return "%".to_string();
    }
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Writes `value` at the end of `out` as a header or property value: printable ASCII as it
/// is, anything else (a line break would end a NATS header) percent-encoded, as the CloudEvents
/// HTTP binding does.
pub fn write_header_value(out: &mut String, value: &str) {
    for b in value.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// What keeps one partner's events together and in order where a destination partitions or
/// groups them (a Kafka record's key, an SQS FIFO queue's message group): the interchange's
/// sender and recipient (0004/0010, as `SENDER/RECIPIENT`); a dead letter's, where it came from;
/// else the event's id.
pub fn partner_key(o: &Outgoing) -> String {
    let value = |a: Attr| o.attributes.get(a);
    match (value(Attr::EdiSender), value(Attr::EdiRecipient)) {
        (Some(s), Some(r)) => format!("{s}/{r}"),
        _ => value(Attr::DeadLetterSource).unwrap_or(&o.id).to_string(),
    }
}

/// The stable id of an event: from the interchange's key (0004, 0010, 0020) and, per message,
/// its group's (0048) and its own reference (0062): never a row id, which differs between
/// inboxes. 128 bits of SHA-256, in hex: a file name, a `Nats-Msg-Id` and a `message_id` as
/// it is.
pub fn event_id(e: &OutboxEvent, payload: Payload) -> String {
    let mut h = Sha256::new();
    let parts: Vec<&str> = match payload {
        Payload::Message => vec![
            "edi-inbox message",
            &e.envelope.sender,
            &e.envelope.recipient,
            &e.envelope.control_ref,
            e.group_ref.as_deref().unwrap_or(""),
            &e.message_ref,
        ],
        Payload::Interchange => vec![
            "edi-inbox interchange",
            &e.envelope.sender,
            &e.envelope.recipient,
            &e.envelope.control_ref,
        ],
    };
    for p in parts {
        // Lengths first: no two lists of values give the same bytes.
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// The UNA service string advice of an interchange's bytes (the six characters after `UNA`).
fn una(raw: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    raw.strip_prefix(b"UNA")
        .and_then(|r| r.get(..6))
        .map(String::from_utf8_lossy)
}

/// The attributes every event starts with: the CloudEvents ones (its id `id`, its type `kind`,
/// the time `created_at` it was written, and where it comes from), then `envelope`'s sender,
/// recipient and control reference (0004, 0010, 0020).
fn first_attributes(id: &str, kind: &str, created_at: &str, envelope: [&str; 3]) -> Attributes {
    let [sender, recipient, control_ref] = envelope;
    let mut attributes = Attributes::with_capacity(16, 256);
    attributes.push(Attr::SpecVersion, "1.0");
    attributes.push(Attr::Id, id);
    attributes.push_parts(
        Attr::Source,
        &["/edi-inbox/", &subject_token(sender)],
        false,
    );
    attributes.push_header(Attr::Type, kind);
    attributes.push(Attr::Time, created_at);
    attributes.push_header(Attr::EdiSender, sender);
    attributes.push_header(Attr::EdiRecipient, recipient);
    attributes.push_header(Attr::EdiControlRef, control_ref);
    attributes
}

/// What goes out for one event (`events` of one message), or for one interchange (`events`
/// all of its messages, in order), from the interchange's bytes `raw`. `None` where the stored
/// offsets do not lie in the bytes (never seen; said instead of sending a wrong body).
pub fn outgoing(
    events: &[OutboxEvent],
    raw: &bytes::Bytes,
    payload: Payload,
    subject: &Template,
) -> Result<Outgoing, String> {
    let e = events.first().ok_or("no event")?;
    let body = match payload {
        Payload::Message => (e.raw_start <= e.raw_end && e.raw_end <= raw.len())
            .then(|| raw.slice(e.raw_start..e.raw_end))
            .ok_or_else(|| {
                format!(
                    "the message's stored place ({}..{}) is outside its interchange ({} bytes)",
                    e.raw_start,
                    e.raw_end,
                    raw.len()
                )
            })?,
        Payload::Interchange => raw.clone(),
    };
    let id = event_id(e, payload);
    let kind = match payload {
        Payload::Message => std::borrow::Cow::Borrowed(e.event_type.as_str()),
        Payload::Interchange => {
            crate::inbox::names::received(e.envelope.standard, "interchange").into()
        }
    };
    let envelope = &*e.envelope;
    let mut attributes = first_attributes(
        &id,
        &kind,
        &e.created_at,
        [&envelope.sender, &envelope.recipient, &envelope.control_ref],
    );
    attributes.push_parts(
        Attr::EdiSyntax,
        &[&envelope.syntax_id, ":", &envelope.syntax_version],
        true,
    );
    if let Some(q) = &envelope.sender_qualifier {
        attributes.push_header(Attr::EdiSenderQualifier, q);
    }
    if let Some(q) = &envelope.recipient_qualifier {
        attributes.push_header(Attr::EdiRecipientQualifier, q);
    }
    if payload == Payload::Message {
        attributes.push_header(Attr::EdiMessageRef, &e.message_ref);
        attributes.push_header(Attr::EdiMessageType, &e.message_type);
        attributes.push_parts(
            Attr::EdiMessageVersion,
            &[&e.version, ":", &e.release, ":", &e.agency],
            true,
        );
        if let Some(g) = &e.group_ref {
            attributes.push_header(Attr::EdiGroupRef, g);
        }
    } else {
        let refs: Vec<&str> = events.iter().map(|e| e.message_ref.as_str()).collect();
        attributes.push_header(Attr::EdiMessageRefs, &refs.join(","));
    }
    if let Some(una) = una(raw) {
        attributes.push_header(Attr::EdiUna, &una);
    }
    Ok(Outgoing {
        id,
        subject: subject.render(e),
        attributes,
        body,
        content_type: content_type(envelope.standard),
    })
}

/// A CONTRL to deliver, as it goes out: its bytes, under an id made of the partner, its own
/// control reference and which sending it is (the same id when the same sending is published
/// again after a crash; another for the answer to a redelivery, which must go out again), to the
/// subject `--subject` makes for `CONTRL`, from us to the partner.
pub fn contrl_outgoing(e: &crate::inbox::ContrlEvent, subject: &Template) -> Outgoing {
    let mut h = Sha256::new();
    for p in [
        "edi-inbox contrl",
        &e.partner,
        &e.own_ref,
        &e.send.to_string(),
    ] {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let id = hex::encode(&h.finalize()[..16]);
    // An X12 answer (TA1, 997, 999) says which in its event type, and is stored with its
    // ISA12; a CONTRL is CONTRL:4:1:UN for syntax 4, CONTRL:D:3:UN before, as stored with it.
    let x12 = e
        .event_type
        .strip_prefix("x12.")
        .and_then(|t| t.strip_suffix(".outbound"));
    let (message_type, version, release) = match x12 {
        Some(kind) => (kind, e.syntax_version.as_str(), ""),
        None if e.syntax_version == "4" => ("CONTRL", "4", "1"),
        None => ("CONTRL", "D", "3"),
    };
    let mut attributes = first_attributes(
        &id,
        &e.event_type,
        &e.created_at,
        [&e.sender, &e.recipient, &e.own_ref],
    );
    attributes.push(Attr::EdiMessageType, message_type);
    attributes.push_header(Attr::EdiAnsweredControlRef, &e.control_ref);
    Outgoing {
        subject: subject.render_values([
            message_type,
            &e.sender,
            &e.recipient,
            version,
            release,
            if x12.is_some() { "x12" } else { "edifact" },
        ]),
        id,
        attributes,
        body: bytes::Bytes::from(e.bytes.clone()),
        content_type: if x12.is_some() {
            X12_CONTENT_TYPE
        } else {
            CONTENT_TYPE
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(event_type: &str, syntax_version: &str) -> crate::inbox::ContrlEvent {
        crate::inbox::ContrlEvent {
            row: 1,
            event_type: event_type.into(),
            created_at: "2026-12-05T09:07:00.000Z".into(),
            attempts: 0,
            send: 1,
            sender: "HUB".into(),
            recipient: "PARTNER".into(),
            partner: "x12:PARTNER:ZZ".into(),
            own_ref: "000000001".into(),
            control_ref: "000001001".into(),
            bytes: b"ISA*...~".to_vec(),
            syntax_version: syntax_version.into(),
        }
    }

    #[test]
    fn an_x12_answer_goes_out_as_x12_under_its_own_type_and_a_contrl_as_edifact() {
        let t = Template::parse("ack.{type}.{recipient}.{version}", None).unwrap();
        let o = contrl_outgoing(&answer("x12.997.outbound", "00401"), &t);
        assert_eq!(o.subject, "ack.997.PARTNER.00401");
        assert_eq!(o.content_type, X12_CONTENT_TYPE);
        assert_eq!(o.attributes.get(Attr::EdiMessageType), Some("997"));
        let o = contrl_outgoing(&answer("x12.TA1.outbound", "00501"), &t);
        assert_eq!(o.subject, "ack.TA1.PARTNER.00501");
        let o = contrl_outgoing(&answer("edifact.CONTRL.outbound", "4"), &t);
        assert_eq!(o.subject, "ack.CONTRL.PARTNER.4");
        assert_eq!(o.content_type, CONTENT_TYPE);
        assert_eq!(o.attributes.get(Attr::EdiMessageType), Some("CONTRL"));
    }

    fn event(sender: &str, message_ref: &str) -> OutboxEvent {
        OutboxEvent {
            row: 7,
            event_type: "edifact.INVOIC.received".into(),
            created_at: "2026-01-02T03:04:05.678Z".into(),
            attempts: 0,
            interchange_id: 1,
            envelope: std::sync::Arc::new(crate::inbox::EventEnvelope {
                standard: crate::standard::Standard::Edifact,
                sender: sender.into(),
                sender_qualifier: Some("14".into()),
                recipient: "HUB".into(),
                recipient_qualifier: None,
                control_ref: "42".into(),
                syntax_id: "UNOC".into(),
                syntax_version: "3".into(),
            }),
            group_ref: None,
            message_ref: message_ref.into(),
            message_type: "INVOIC".into(),
            version: "D".into(),
            release: "96A".into(),
            agency: "UN".into(),
            raw_start: 3,
            raw_end: 6,
        }
    }

    #[test]
    fn a_sender_can_never_split_widen_or_break_a_subject() {
        let t = Template::parse("edifact.{type}.{sender}", None).unwrap();
        for (sender, want) in [
            ("5412345000013:14", "edifact.INVOIC.5412345000013%3A14"),
            ("A.B", "edifact.INVOIC.A%2EB"),
            ("*", "edifact.INVOIC.%2A"),
            (">", "edifact.INVOIC.%3E"),
            ("A B", "edifact.INVOIC.A%20B"),
            ("50%", "edifact.INVOIC.50%25"),
            ("", "edifact.INVOIC.%"),
        ] {
            let subject = t.render(&event(sender, "1"));
            assert_eq!(subject, want);
            assert_eq!(subject.split('.').count(), 3);
            assert!(!subject.contains(['*', '>', ' ']));
        }
        let t = Template::parse("{type}.x-{sender}", Some("acme.edi")).unwrap();
        assert_eq!(t.render(&event("S", "1")), "acme.edi.INVOIC.x-S");
        assert_eq!(t.wildcard(), "acme.edi.*.*");
        for bad in ["a..b", "a.*", "a.>", "a b", "{nope}", ""] {
            assert!(Template::parse(bad, None).is_err(), "{bad}");
        }
    }

    /// `{standard}` names the standard of the event's interchange, so that X12 and EDIFACT
    /// events can go to subjects of their own.
    #[test]
    fn the_standard_has_a_placeholder() {
        let t = Template::parse("{standard}.{type}", None).unwrap();
        let mut e = event("S", "1");
        assert_eq!(t.render(&e), "edifact.INVOIC");
        let envelope = std::sync::Arc::make_mut(&mut e.envelope);
        envelope.standard = crate::standard::Standard::X12;
        e.message_type = "850".into();
        assert_eq!(t.render(&e), "x12.850");
        assert_eq!(t.wildcard(), "*.*");
    }

    #[test]
    fn the_id_is_stable_and_tells_events_apart() {
        let a = event_id(&event("S", "1"), Payload::Message);
        assert_eq!(a, event_id(&event("S", "1"), Payload::Message));
        assert_eq!(a.len(), 32);
        assert_ne!(a, event_id(&event("S", "2"), Payload::Message));
        assert_ne!(a, event_id(&event("S", "1"), Payload::Interchange));
        let mut e = event("S", "1");
        e.row = 99;
        e.created_at = "other".into();
        assert_eq!(
            a,
            event_id(&e, Payload::Message),
            "row and time do not count"
        );
        // "AB" + "C" is not "A" + "BC".
        let (mut x, mut y) = (event("AB", "1"), event("A", "1"));
        std::sync::Arc::make_mut(&mut x.envelope).recipient = "C".into();
        std::sync::Arc::make_mut(&mut y.envelope).recipient = "BC".into();
        assert_ne!(
            event_id(&x, Payload::Message),
            event_id(&y, Payload::Message)
        );
    }

    #[test]
    fn the_body_is_the_message_and_the_headers_carry_the_envelope() {
        let raw = bytes::Bytes::from_static(b"UNA:+.? 'UNB...");
        let t = Template::parse("edifact.{type}.{sender}", None).unwrap();
        let o = outgoing(&[event("S\nX", "1")], &raw, Payload::Message, &t).unwrap();
        assert_eq!(&o.body[..], b":+.");
        let bare = |a: Attr| -> &'static str { attr_binding!(a, "") };
        let get = |k: &str| {
            o.attributes
                .iter()
                .find(|(a, _)| bare(*a) == k)
                .map(|(_, v)| v.to_string())
        };
        // A line break in a value (a release character that is one) never reaches a header.
        let mut odd = event("S", "1");
        odd.event_type = "edifact.ORD\nERS.received".into();
        let o2 = outgoing(&[odd], &raw, Payload::Message, &t).unwrap();
        assert!(o2.attributes.iter().all(|(_, v)| !v.contains(['\n', '\r'])));
        assert_eq!(get("specversion").as_deref(), Some("1.0"));
        assert_eq!(get("id"), Some(o.id.clone()));
        assert_eq!(get("type").as_deref(), Some("edifact.INVOIC.received"));
        assert_eq!(get("edisender").as_deref(), Some("S%0AX"));
        assert_eq!(get("ediuna").as_deref(), Some(":+.? '"));
        assert_eq!(get("edisyntax").as_deref(), Some("UNOC:3"));
        let mut bad = event("S", "1");
        bad.raw_end = 999;
        assert!(outgoing(&[bad], &raw, Payload::Message, &t).is_err());
        let whole = outgoing(&[event("S", "1")], &raw, Payload::Interchange, &t).unwrap();
        assert_eq!(whole.body, raw);
    }
}
