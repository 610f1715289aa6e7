//! What an event says about itself, besides its body: the CloudEvents attributes (and the
//! `edi...` extensions), and what a dead letter carries. Bare names here; each destination
//! writes them in its binding, in its own file (`ce-` headers on NATS, `cloudEvents:`
//! application properties on AMQP), with [`attr_binding!`].

/// One attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    SpecVersion,
    Id,
    Source,
    Type,
    Time,
    EdiSender,
    EdiSenderQualifier,
    EdiRecipient,
    EdiRecipientQualifier,
    EdiControlRef,
    EdiSyntax,
    EdiUna,
    EdiMessageRef,
    EdiMessageRefs,
    EdiMessageType,
    EdiMessageVersion,
    EdiGroupRef,
    EdiAnsweredControlRef,
    /// Not CloudEvents: why a dead letter was rejected, where it came from, and its
    /// `edi-filename`, under the same names in every binding.
    DeadLetterReason,
    DeadLetterSource,
    DeadLetterFilename,
}

/// An attribute's name in a binding whose CloudEvents names are `$prefix` and the bare name: a
/// `&'static str`, made at compile time (building header names per message was a fifth of the
/// time publish took).
macro_rules! attr_binding {
    ($attr:expr, $prefix:literal) => {
        match $attr {
            $crate::publish::Attr::SpecVersion => concat!($prefix, "specversion"),
            $crate::publish::Attr::Id => concat!($prefix, "id"),
            $crate::publish::Attr::Source => concat!($prefix, "source"),
            $crate::publish::Attr::Type => concat!($prefix, "type"),
            $crate::publish::Attr::Time => concat!($prefix, "time"),
            $crate::publish::Attr::EdiSender => concat!($prefix, "edisender"),
            $crate::publish::Attr::EdiSenderQualifier => concat!($prefix, "edisenderqualifier"),
            $crate::publish::Attr::EdiRecipient => concat!($prefix, "edirecipient"),
            $crate::publish::Attr::EdiRecipientQualifier => {
                concat!($prefix, "edirecipientqualifier")
            }
            $crate::publish::Attr::EdiControlRef => concat!($prefix, "edicontrolref"),
            $crate::publish::Attr::EdiSyntax => concat!($prefix, "edisyntax"),
            $crate::publish::Attr::EdiUna => concat!($prefix, "ediuna"),
            $crate::publish::Attr::EdiMessageRef => concat!($prefix, "edimessageref"),
            $crate::publish::Attr::EdiMessageRefs => concat!($prefix, "edimessagerefs"),
            $crate::publish::Attr::EdiMessageType => concat!($prefix, "edimessagetype"),
            $crate::publish::Attr::EdiMessageVersion => concat!($prefix, "edimessageversion"),
            $crate::publish::Attr::EdiGroupRef => concat!($prefix, "edigroupref"),
            $crate::publish::Attr::EdiAnsweredControlRef => {
                concat!($prefix, "ediansweredcontrolref")
            }
            $crate::publish::Attr::DeadLetterReason => "edi-inbox-reason",
            $crate::publish::Attr::DeadLetterSource => "edi-inbox-source",
            $crate::publish::Attr::DeadLetterFilename => "edi-filename",
        }
    };
}

#[cfg(test)]
mod tests {
    use super::Attr;

    const ALL: [Attr; 21] = [
        Attr::SpecVersion,
        Attr::Id,
        Attr::Source,
        Attr::Type,
        Attr::Time,
        Attr::EdiSender,
        Attr::EdiSenderQualifier,
        Attr::EdiRecipient,
        Attr::EdiRecipientQualifier,
        Attr::EdiControlRef,
        Attr::EdiSyntax,
        Attr::EdiUna,
        Attr::EdiMessageRef,
        Attr::EdiMessageRefs,
        Attr::EdiMessageType,
        Attr::EdiMessageVersion,
        Attr::EdiGroupRef,
        Attr::EdiAnsweredControlRef,
        Attr::DeadLetterReason,
        Attr::DeadLetterSource,
        Attr::DeadLetterFilename,
    ];

    #[test]
    fn each_binding_prefixes_the_cloudevents_names_and_keeps_the_dead_letter_ones() {
        let mut seen = std::collections::HashSet::new();
        for a in ALL {
            let (bare, nats, amqp) = (
                attr_binding!(a, ""),
                attr_binding!(a, "ce-"),
                attr_binding!(a, "cloudEvents:"),
            );
            assert!(seen.insert(bare), "{bare} twice");
            if bare.starts_with("edi-") {
                assert_eq!((nats, amqp), (bare, bare), "{a:?}");
            } else {
                // CloudEvents: lower-case letters and digits only.
                assert!(
                    bare.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                );
                assert_eq!(nats, format!("ce-{bare}"));
                assert_eq!(amqp, format!("cloudEvents:{bare}"));
            }
        }
    }
}
