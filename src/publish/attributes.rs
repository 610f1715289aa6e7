//! What an event says about itself, besides its body: the CloudEvents attributes (and the
//! `edi...` extensions), and what a dead letter carries. Bare names here; each destination
//! writes them in its binding, in its own file (the binding's prefix and where it puts them:
//! `ce-` headers on NATS, say), with [`attr_binding!`].

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

/// An event's attributes, in the order added: every value written into one string, so that an
/// event's dozen attributes cost two allocations, not a dozen (malloc and free were a third of
/// publish's time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    text: String,
    /// Each attribute and where its value lies in `text`.
    spans: Vec<(Attr, usize, usize)>,
}

impl Attributes {
    /// Room for `n` attributes of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Attributes {
        Attributes {
            text: String::with_capacity(bytes),
            spans: Vec::with_capacity(n),
        }
    }

    /// Adds `value` as it is.
    pub fn push(&mut self, attr: Attr, value: &str) {
        self.push_parts(attr, &[value], false);
    }

    /// Adds `value` as a header value ([`super::write_header_value`]).
    pub fn push_header(&mut self, attr: Attr, value: &str) {
        self.push_parts(attr, &[value], true);
    }

    /// Adds the value that `parts` make one after the other, each as a header value where
    /// `header` says so.
    pub fn push_parts(&mut self, attr: Attr, parts: &[&str], header: bool) {
        let start = self.text.len();
        for part in parts {
            if header {
                super::write_header_value(&mut self.text, part);
            } else {
                self.text.push_str(part);
            }
        }
        self.spans.push((attr, start, self.text.len()));
    }

    /// The value of `attr`, where it has one.
    pub fn get(&self, attr: Attr) -> Option<&str> {
        self.iter().find(|(a, _)| *a == attr).map(|(_, v)| v)
    }

    /// Each attribute and its value, in the order added (an exact size, for a destination to
    /// make room for them).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Attr, &str)> {
        self.spans
            .iter()
            .map(|&(a, start, end)| (a, self.text.get(start..end).unwrap_or_default()))
    }
}

impl<'a> FromIterator<(Attr, &'a str)> for Attributes {
    /// Values as they are.
    fn from_iter<I: IntoIterator<Item = (Attr, &'a str)>>(iter: I) -> Attributes {
        let mut attributes = Attributes::default();
        for (a, v) in iter {
            attributes.push(a, v);
        }
        attributes
    }
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

    #[test]
    fn attributes_keep_their_order_and_their_values_apart() {
        use super::Attributes;
        let mut a = Attributes::with_capacity(4, 16);
        a.push(Attr::Id, "1");
        a.push_header(Attr::EdiSender, "A\nB%");
        a.push_parts(Attr::EdiSyntax, &["UNOC", ":", "3"], true);
        a.push(Attr::EdiUna, "");
        let all: Vec<(Attr, &str)> = a.iter().collect();
        assert_eq!(
            all,
            [
                (Attr::Id, "1"),
                (Attr::EdiSender, "A%0AB%25"),
                (Attr::EdiSyntax, "UNOC:3"),
                (Attr::EdiUna, ""),
            ]
        );
        assert_eq!(a.get(Attr::EdiSyntax), Some("UNOC:3"));
        assert_eq!(a.get(Attr::Type), None);
        assert_eq!(a.iter().len(), 4);
        let b: Attributes = [(Attr::Id, "1")].into_iter().collect();
        assert_eq!(b.get(Attr::Id), Some("1"));
    }
}
