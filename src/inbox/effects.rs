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
    /// Its segments as JSON (docs/parser.md), made where a statement uses `:message`, each
    /// segment's place in it kept for SQLite's `message_segments`.
    pub json: Option<std::sync::Arc<edifact::MessageJson>>,
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
                opt(message.and_then(|m| m.json.as_deref().map(|j| j.text.as_str()))).json()
            }
        }
    }

    /// The JSON of `message`'s segments (docs/parser.md), as `:message` binds it.
    pub fn message_json(&self, message: &Message) -> Result<edifact::MessageJson, InboxError> {
        let read = edifact::message_segments(self.interchange, message).map_err(|e| {
            InboxError::Backend(
                format!("message {} cannot be read whole: {e}", message.reference).into(),
            )
        })?;
        Ok(read.to_json())
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
    /// its row's id taken from `ids` (the interchange's message rows in order), its JSON made
    /// where a statement of `mapping` uses it.
    pub fn of(
        scope: &Scope<'_>,
        n: usize,
        message: &'a Message,
        ids: &[i64],
        mapping: &crate::effects::Mapping,
    ) -> Result<MessageScope<'a>, InboxError> {
        let id = *ids.get(n).ok_or_else(|| {
            InboxError::Backend(format!("message {} has no row", message.reference).into())
        })?;
        let json = if uses_message(&mapping.statements) {
            Some(std::sync::Arc::new(scope.message_json(message)?))
        } else {
            None
        };
        Ok(MessageScope { id, message, json })
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

/// True where a statement of `mapping` uses `:message` (its JSON is made only then).
pub fn uses_message(statements: &[crate::effects::Statement]) -> bool {
    statements
        .iter()
        .any(|s| s.params().any(|p| p == Param::Message))
}
