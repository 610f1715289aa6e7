//! The operator's side effects as both backends run them: the value each named parameter takes
//! for an interchange and one of its messages, the same on SQLite and PostgreSQL (docs/effects.md).
//! How a backend binds them, prepares the statements and tells a failure of the data from one of
//! the infrastructure stays in its own `effects.rs`.

use crate::edifact::{self, Interchange, Message};
use crate::effects::Param;

use super::InboxError;

/// How the side effects run: each statement's time limit, and (PostgreSQL) the role they run as;
/// whether their installation is kept, and whether what each statement does is traced.
#[derive(Debug, Clone)]
pub struct EffectSettings {
    pub timeout: std::time::Duration,
    pub role: Option<String>,
    pub mode: InstallMode,
    /// Each statement's rows changed kept, for [`super::SideEffects::take_trace`].
    pub trace: bool,
}

/// What becomes of the transaction that installs the side effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallMode {
    /// Committed: the operator's migrations applied for good (ingest, consume, receive).
    Keep,
    /// Rolled back: everything checked, nothing changed (`effects check`).
    Check,
    /// Left open, for decisions in it, then rolled back by the caller (`effects try`).
    Try,
}

/// What installing the side effects found: each of the operator's migrations, and whether it
/// was applied now (else before).
#[derive(Debug, Clone, Default)]
pub struct Installation {
    pub migrations: Vec<(String, bool)>,
    /// The files PostgreSQL runs a statement at a time, not as a function called once per run
    /// of a batch's messages (docs/effects.md), and why.
    pub one_at_a_time: Vec<(String, String)>,
}

/// One statement run while tracing: for which interchange and message, and the rows it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traced {
    pub control_ref: String,
    pub message_ref: Option<String>,
    pub statement: String,
    pub rows: u64,
}

/// What each statement did, kept where the settings ask (`effects try`).
#[derive(Debug, Default)]
pub struct Trace(std::sync::Mutex<Vec<Traced>>);

impl Trace {
    /// A statement of `scope`'s interchange (and `message`) changed `rows` rows.
    pub fn push(
        &self,
        scope: &Scope<'_>,
        message: Option<&MessageScope<'_>>,
        statement: &str,
        rows: u64,
    ) {
        if let Ok(mut t) = self.0.lock() {
            t.push(Traced {
                control_ref: scope.interchange.unb.control_ref.to_string(),
                message_ref: message.map(|m| m.message.reference.to_string()),
                statement: statement.to_string(),
                rows,
            });
        }
    }

    /// What was kept, taken.
    pub fn take(trace: Option<&Trace>) -> Vec<Traced> {
        trace
            .and_then(|t| t.0.lock().ok().map(|mut t| std::mem::take(&mut *t)))
            .unwrap_or_default()
    }
}

/// A parameter's value, typed as the docs say: text, a whole number, or JSON text (`:message`,
/// `jsonb` on PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    Null,
    Text(&'a str),
    Int(i64),
    Json(&'a str),
}

/// One message of a new interchange, as its side effects see it.
pub struct MessageScope<'a> {
    /// Its row's id in `messages`.
    pub id: i64,
    pub message: &'a Message,
    /// The message as its statements read it, made where a statement uses `:message`.
    pub held: Option<std::sync::Arc<HeldMessage>>,
}

/// A message as `:message` gives it to the statements that use it.
#[derive(Debug)]
pub struct HeldMessage {
    form: HeldForm,
}

#[derive(Debug)]
enum HeldForm {
    /// Its segments as JSON (docs/parser.md), each segment's place in it kept for SQLite's
    /// `message_segments`.
    Json(edifact::MessageJson),
    /// Its segments, each written as JSON only when SQLite's `message_segments` serves it: where
    /// every statement reads `:message` only as that table's argument, which then gets
    /// [`HELD_ARGUMENT`] for it instead of the whole message's JSON.
    Segments(edifact::HeldSegments),
}

/// The messages of a new interchange held ahead, on a reading thread, for the side effects that
/// read them only through SQLite's `message_segments`: reading a message's segments again was
/// a fifth of what such a mapping cost the deciding thread, which the whole run waits on, while
/// the reading threads had time to spare (BENCHMARKS.md, issue 39).
#[derive(Debug, Clone)]
pub struct HoldAhead {
    effects: std::sync::Arc<crate::effects::Effects>,
}

/// Each message of an interchange (by position) held ahead, or `None`: empty where none is.
pub type HeldAhead = Vec<Option<std::sync::Arc<HeldMessage>>>;

impl HoldAhead {
    /// What a reading thread holds for `effects`, where one of its mappings reads `:message`
    /// only through `message_segments`; `None` where none does.
    pub fn of(effects: std::sync::Arc<crate::effects::Effects>) -> Option<HoldAhead> {
        effects
            .by_type
            .values()
            .any(holds_ahead)
            .then_some(HoldAhead { effects })
    }

    /// `interchange`'s messages whose mapping reads them only through `message_segments`, held
    /// as their segments. A message that cannot be read so is left to the deciding thread, which
    /// reads it again and says why.
    pub fn hold(&self, interchange: &Interchange<'_>) -> HeldAhead {
        let held: HeldAhead = interchange
            .messages
            .iter()
            .map(|m| {
                self.effects
                    .for_message(&m.message_type, &m.version, &m.release)
                    .filter(|mapping| holds_ahead(mapping))
                    .and_then(|_| edifact::message_segments(interchange, m).ok())
                    .map(|read| std::sync::Arc::new(HeldMessage::segments(read.to_held())))
            })
            .collect();
        if held.iter().all(Option::is_none) {
            return Vec::new();
        }
        held
    }
}

fn holds_ahead(mapping: &crate::effects::Mapping) -> bool {
    mapping.uses_message && mapping.message_only_by_segments
}

/// What `:message` binds for a message held as its segments alone: a statement sees it only as
/// `message_segments`' argument, which tells it from a message's JSON (never a bare string).
pub const HELD_ARGUMENT: &str = "edi-inbox: the message held for message_segments";

impl HeldMessage {
    /// Held as its JSON, which `:message` binds.
    pub fn json(json: edifact::MessageJson) -> HeldMessage {
        HeldMessage::of(HeldForm::Json(json))
    }

    /// Held as its segments alone, `:message` binding [`HELD_ARGUMENT`].
    pub fn segments(segments: edifact::HeldSegments) -> HeldMessage {
        HeldMessage::of(HeldForm::Segments(segments))
    }

    fn of(form: HeldForm) -> HeldMessage {
        HeldMessage { form }
    }

    /// True where it is held as its segments alone (`:message` binding [`HELD_ARGUMENT`]).
    pub fn is_segments(&self) -> bool {
        matches!(self.form, HeldForm::Segments(_))
    }

    /// About how many bytes of memory it holds, itself and its `Arc` included.
    pub fn size(&self) -> usize {
        std::mem::size_of::<HeldMessage>()
            + 2 * std::mem::size_of::<usize>()
            + match &self.form {
                HeldForm::Json(j) => {
                    j.text.len()
                        + j.segments.len()
                            * std::mem::size_of::<(edifact::Tag, std::ops::Range<usize>)>()
                }
                HeldForm::Segments(s) => s.size(),
            }
    }

    /// How many segments it has.
    pub fn len(&self) -> usize {
        match &self.form {
            HeldForm::Json(j) => j.segments.len(),
            HeldForm::Segments(s) => s.len(),
        }
    }

    /// The `k`th segment's tag (0-based).
    pub fn tag(&self, k: usize) -> Option<&str> {
        self.tag_of(k).map(|tag| tag.as_str())
    }

    fn tag_of(&self, k: usize) -> Option<&edifact::Tag> {
        match &self.form {
            HeldForm::Json(j) => j.segments.get(k).map(|(tag, _)| tag),
            HeldForm::Segments(s) => s.tag(k),
        }
    }

    /// The positions from `from` up to (not including) `to` of its segments whose tag is
    /// `name` (as [`edifact::Tag::as_str`] shows it), in order, added to `out`.
    pub fn positions_of(&self, name: &[u8], from: usize, to: usize, out: &mut Vec<usize>) {
        // A look at each segment's tag: an index of the tags cost more to make than the half
        // dozen lookups of a mapping save (callgrind, an invoice of 100 segments).
        let Some(tag) = edifact::Tag::named(name) else {
            return;
        };
        let to = to.min(self.len());
        match &self.form {
            HeldForm::Json(j) => out.extend(
                j.segments
                    .get(from..to)
                    .into_iter()
                    .flatten()
                    .zip(from..)
                    .filter(|((t, _), _)| *t == tag)
                    .map(|(_, k)| k),
            ),
            HeldForm::Segments(s) => s.positions_of(tag, from, to, out),
        }
    }

    /// The `k`th segment (0-based) as JSON.
    pub fn segment(&self, k: usize) -> Option<&str> {
        match &self.form {
            HeldForm::Json(j) => j.segments.get(k).and_then(|(_, at)| j.text.get(at.clone())),
            HeldForm::Segments(s) => s.json(k),
        }
    }

    /// What `:message` binds: the message's JSON, or [`HELD_ARGUMENT`].
    pub fn argument(&self) -> &str {
        match &self.form {
            HeldForm::Json(j) => &j.text,
            HeldForm::Segments(_) => HELD_ARGUMENT,
        }
    }
}

/// A new interchange, as its side effects see it.
pub struct Scope<'a> {
    pub interchange: &'a Interchange<'a>,
    pub interchange_id: i64,
    pub sha256: &'a str,
    /// The file or delivery it came in, as recorded.
    pub source: &'a str,
    pub received_at: &'a str,
    /// True where `reapply --applied` runs the side effects again over history.
    pub reapply: bool,
    /// Its messages held ahead ([`HoldAhead`]), by position; empty where none was.
    pub held: &'a [Option<std::sync::Arc<HeldMessage>>],
}

impl Scope<'_> {
    /// The value of `param`, for the interchange and (for a message's statement) `message`.
    /// A message's parameter without a message is NULL; the folder's loader refuses those in
    /// `_interchange.sql`, so it never happens there.
    pub fn value<'s>(&'s self, param: Param, message: Option<&'s MessageScope<'s>>) -> Value<'s> {
        let u = &self.interchange.unb;
        let text = |v: &'s str| Value::Text(v);
        let opt = |v: Option<&'s str>| v.map_or(Value::Null, Value::Text);
        let m = message.map(|m| m.message);
        match param {
            Param::Sender => text(u.sender.as_str()),
            Param::SenderQualifier => opt(u.sender_qualifier.as_deref()),
            Param::Recipient => text(u.recipient.as_str()),
            Param::RecipientQualifier => opt(u.recipient_qualifier.as_deref()),
            Param::ControlRef => text(u.control_ref.as_str()),
            Param::InterchangeId => Value::Int(self.interchange_id),
            Param::Test => Value::Int(i64::from(u.test_indicator.as_deref() == Some("1"))),
            Param::ReceivedAt => text(self.received_at),
            Param::Source => text(self.source),
            Param::Sha256 => text(self.sha256),
            Param::Reapply => Value::Int(i64::from(self.reapply)),
            Param::Standard => text(self.interchange.standard.as_str()),
            Param::MessageId => message.map_or(Value::Null, |m| Value::Int(m.id)),
            Param::MessageRef => opt(m.map(|m| m.reference.as_str())),
            Param::MessageType => opt(m.map(|m| m.message_type.as_str())),
            Param::MessageVersion => opt(m.map(|m| m.version.as_str())),
            Param::MessageRelease => opt(m.map(|m| m.release.as_str())),
            Param::Agency => opt(m.map(|m| m.agency.as_str())),
            Param::AssociationCode => opt(m.and_then(|m| m.association_code.as_deref())),
            Param::GroupRef => opt(m.and_then(|m| {
                m.group
                    .and_then(|g| self.interchange.groups.get(g))
                    .map(|g| g.reference.as_str())
            })),
            Param::Message => {
                opt(message.and_then(|m| m.held.as_deref().map(|h| h.argument()))).json()
            }
        }
    }

    /// `message` as its statements read it: its segments' JSON (docs/parser.md), as `:message`
    /// binds it, or where `by_segments` the segments alone.
    pub fn held_message(
        &self,
        message: &Message,
        by_segments: bool,
    ) -> Result<HeldMessage, InboxError> {
        let read = edifact::message_segments(self.interchange, message).map_err(|e| {
            InboxError::Backend(
                format!("message {} cannot be read whole: {e}", message.reference).into(),
            )
        })?;
        Ok(if by_segments {
            HeldMessage::segments(read.to_held())
        } else {
            HeldMessage::json(read.to_json())
        })
    }
}

impl<'a> Value<'a> {
    fn json(self) -> Value<'a> {
        match self {
            Value::Text(t) => Value::Json(t),
            other => other,
        }
    }
}

impl<'a> MessageScope<'a> {
    /// The `n`th message (0-based) of `scope`'s interchange as its mapping's statements see it,
    /// its row's id taken from `ids` (the interchange's message rows in order), the message held
    /// where a statement of `mapping` uses it: as its segments alone where `segments_served`
    /// (SQLite's `message_segments` serves them) and every statement reads it only through
    /// that table, else as its JSON.
    pub fn of(
        scope: &Scope<'_>,
        n: usize,
        message: &'a Message,
        ids: &[i64],
        mapping: &crate::effects::Mapping,
        segments_served: bool,
    ) -> Result<MessageScope<'a>, InboxError> {
        let id = *ids.get(n).ok_or_else(|| {
            InboxError::Backend(format!("message {} has no row", message.reference).into())
        })?;
        let held = if mapping.uses_message {
            let by_segments = segments_served && mapping.message_only_by_segments;
            match scope.held.get(n) {
                // Held ahead in the only form a reading thread holds.
                Some(Some(ahead)) if by_segments && ahead.is_segments() => Some(ahead.clone()),
                _ => Some(std::sync::Arc::new(
                    scope.held_message(message, by_segments)?,
                )),
            }
        } else {
            None
        };
        Ok(MessageScope { id, message, held })
    }
}

/// The mapping `reapply --applied` runs for `message`, where it runs: a message of the filter's
/// type with a file for it, and with `--changed` one whose recorded mapping (read by
/// `recorded`, only then) is not the one installed now.
pub fn to_reapply<'e>(
    effects: &'e crate::effects::Effects,
    filter: &super::ReapplyFilter,
    message: &Message,
    recorded: impl FnOnce() -> Result<Option<String>, InboxError>,
) -> Result<Option<&'e crate::effects::Mapping>, InboxError> {
    let Some(mapping) = effects
        .for_message(&message.message_type, &message.version, &message.release)
        .filter(|_| *message.message_type == *filter.message_type)
    else {
        return Ok(None);
    };
    if filter.changed
        && recorded()?.as_deref() == Some(effects.checksum_for(Some(mapping)).as_str())
    {
        return Ok(None);
    }
    Ok(Some(mapping))
}

/// A stored interchange parsed again from its bytes (`reapply --applied`): they were accepted
/// once, so an error here is the store's, not the partner's.
pub fn read_again(raw: &[u8], id: i64) -> Result<Interchange<'_>, InboxError> {
    match crate::envelopes::interchanges(raw).next() {
        Some(Ok(i)) => Ok(i),
        Some(Err(e)) => Err(InboxError::Backend(
            format!("stored interchange {id} cannot be read again: {e}").into(),
        )),
        None => Err(InboxError::Backend(
            format!("stored interchange {id} holds no interchange").into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVOIC: &[u8] = b"UNB+UNOC:3+S+R+240101:1200+REF'UNH+1+INVOIC:D:96A:UN'BGM+380+INV1+9'\
        UNT+3+1'UNZ+1+REF'";

    /// The scope of interchange 1 read from `i`, its messages held ahead as `held` says.
    fn scope<'a>(
        i: &'a Interchange<'a>,
        held: &'a [Option<std::sync::Arc<HeldMessage>>],
    ) -> Scope<'a> {
        Scope {
            interchange: i,
            interchange_id: 1,
            sha256: "",
            source: "",
            received_at: "",
            reapply: false,
            held,
        }
    }

    /// `:message` as a mapping of `sql` binds it, where the backend's `message_segments` serves
    /// held segments (`served`) or not.
    fn bound(sql: &str, served: bool) -> Option<String> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::write(dir.path().join("INVOIC.sql"), sql).expect("a file");
        let effects = crate::effects::Effects::load(dir.path()).expect("the mapping");
        let mapping = &effects.by_type["INVOIC"];
        let i = crate::envelopes::interchanges(INVOIC)
            .next()
            .expect("an interchange")
            .expect("read");
        let scope = scope(&i, &[]);
        let ms = MessageScope::of(&scope, 0, &i.messages[0], &[7], mapping, served).unwrap();
        assert_eq!(ms.id, 7);
        match scope.value(Param::Message, Some(&ms)) {
            Value::Json(text) => Some(text.to_string()),
            Value::Null => None,
            other => panic!("{other:?}"),
        }
    }

    /// The message's JSON is written only where a statement reads it otherwise than through
    /// `message_segments`, or the backend's table cannot serve held segments (PostgreSQL).
    #[test]
    fn the_json_is_written_only_where_a_statement_reads_it() {
        let json = r#"[["UNH",["1"],["INVOIC","D","96A","UN"]],["BGM",["380"],["INV1"],["9"]],["UNT",["3"],["1"]]]"#;
        let by_segments = "SELECT segment FROM message_segments(:message) WHERE tag = 'BGM'";
        assert_eq!(bound(by_segments, true).as_deref(), Some(HELD_ARGUMENT));
        assert_eq!(bound(by_segments, false).as_deref(), Some(json));
        let both = format!("{by_segments}; SELECT :message -> 1");
        assert_eq!(bound(&both, true).as_deref(), Some(json));
        assert_eq!(bound("SELECT :sender", true), None);
    }

    /// Effects of `files` (name, SQL) in a temporary folder.
    fn effects(files: &[(&str, &str)]) -> std::sync::Arc<crate::effects::Effects> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        for (name, sql) in files {
            std::fs::write(dir.path().join(name), sql).expect("a file");
        }
        std::sync::Arc::new(crate::effects::Effects::load(dir.path()).expect("the mapping"))
    }

    /// A reading thread holds a message only where its mapping reads `:message` only through
    /// `message_segments`: the same segments the deciding thread would hold, and what
    /// `MessageScope::of` then uses instead of reading them again.
    #[test]
    fn messages_are_held_ahead_only_for_a_mapping_by_segments() {
        let by_segments = "SELECT segment FROM message_segments(:message) WHERE tag = 'BGM'";
        assert!(HoldAhead::of(effects(&[("INVOIC.sql", "SELECT :sender")])).is_none());
        assert!(HoldAhead::of(effects(&[("INVOIC.sql", "SELECT :message -> 1")])).is_none());
        let both = format!("{by_segments}; SELECT :message -> 1");
        assert!(HoldAhead::of(effects(&[("INVOIC.sql", &both)])).is_none());

        let fx = effects(&[("INVOIC.sql", by_segments)]);
        let hold = HoldAhead::of(fx.clone()).expect("a mapping by segments");
        let text = b"UNB+UNOC:3+S+R+240101:1200+REF'UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'\
            UNH+2+INVOIC:D:96A:UN'BGM+380+INV1+9'DTM+137:20240101:102'UNT+4+2'UNZ+2+REF'";
        let i = crate::envelopes::interchanges(text)
            .next()
            .expect("an interchange")
            .expect("read");
        let held = hold.hold(&i);
        assert_eq!(held.len(), 2);
        assert!(held[0].is_none(), "ORDERS has no mapping");
        let ahead = held[1].as_ref().expect("the INVOIC held");
        let own = i.messages[1].clone();
        let direct = edifact::message_segments(&i, &own).expect("its segments");
        assert!(ahead.is_segments());
        assert_eq!(ahead.len(), direct.len());
        for k in 0..direct.len() {
            let want = direct.to_held();
            assert_eq!(ahead.segment(k), want.json(k), "segment {k}");
            assert_eq!(ahead.tag(k), want.tag(k).map(|t| t.as_str()), "segment {k}");
        }
        // Its bytes (the message's but for its terminators) and each segment's place.
        assert!(ahead.size() > own.span.len() + 3 * 16, "{}", ahead.size());

        let scope = scope(&i, &held);
        let mapping = &fx.by_type["INVOIC"];
        let ms = MessageScope::of(&scope, 1, &i.messages[1], &[3, 4], mapping, true).unwrap();
        let used = ms.held.expect("held");
        assert!(
            std::sync::Arc::ptr_eq(&used, ahead),
            "the message held ahead is used"
        );
        // A backend whose table reads the JSON (PostgreSQL) writes it, whatever was held.
        let ms = MessageScope::of(&scope, 1, &i.messages[1], &[3, 4], mapping, false).unwrap();
        assert!(!ms.held.expect("held").is_segments());

        // None held: an interchange without a mapped message.
        let orders = crate::envelopes::interchanges(
            b"UNB+UNOC:3+S+R+240101:1200+R2'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+R2'",
        )
        .next()
        .expect("an interchange")
        .expect("read");
        assert!(hold.hold(&orders).is_empty());
    }
}
