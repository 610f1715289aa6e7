//! The XML of an AS4 message, read into a small tree with its prefixes kept (the canonical form a
//! signature covers is written with the document's own prefixes) and every limit of a hostile
//! sender's reach: the depth, the number of nodes, no DTD, no entity but the five predefined
//! ones and character references. Line ends and attribute values are normalized as an XML
//! processor does, so that the canonical form (`c14n.rs`) is the one the signer computed.

use std::borrow::Cow;

use quick_xml::events::Event;

/// How deep elements may nest, at most.
pub const MAX_DEPTH: usize = 64;

/// How many nodes (elements and texts) one document may have, at most.
pub const MAX_NODES: usize = 20_000;

/// How many attributes one document may have, at most (namespace declarations apart).
pub const MAX_ATTRIBUTES: usize = 20_000;

/// How many namespace declarations one document may have, at most. An AS4 envelope declares a
/// score; every name is looked up through those in scope, and the canonical form of each
/// element gathers them, so their number bounds the work a document can ask for.
pub const MAX_NAMESPACES: usize = 256;

/// Why a document was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    #[error("the XML is not well-formed at byte {offset}: {reason}")]
    Malformed { offset: u64, reason: String },
    #[error("the XML has a document type declaration (DTDs are not taken)")]
    Dtd,
    #[error("the XML nests deeper than {MAX_DEPTH} elements")]
    TooDeep,
    #[error("the XML has more than {MAX_NODES} nodes")]
    TooLarge,
    #[error("the XML has more than {MAX_ATTRIBUTES} attributes")]
    TooManyAttributes,
    #[error("the XML declares more than {MAX_NAMESPACES} namespaces")]
    TooManyNamespaces,
    #[error("the XML uses the prefix {0:?} without declaring it")]
    UnboundPrefix(String),
    #[error("the XML refers to the entity &{0}; (only the predefined ones are taken)")]
    Entity(String),
}

/// A qualified name as written: its prefix (empty for none) and local part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QName {
    pub prefix: String,
    pub local: String,
}

impl QName {
    fn parse(raw: &str) -> QName {
        match raw.split_once(':') {
            Some((prefix, local)) => QName {
                prefix: prefix.to_string(),
                local: local.to_string(),
            },
            None => QName {
                prefix: String::new(),
                local: raw.to_string(),
            },
        }
    }

    /// `prefix:local`, or `local`.
    pub fn written(&self) -> Cow<'_, str> {
        if self.prefix.is_empty() {
            Cow::Borrowed(&self.local)
        } else {
            Cow::Owned(format!("{}:{}", self.prefix, self.local))
        }
    }
}

/// An attribute (never a namespace declaration: those are in [`Element::namespaces`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub name: QName,
    /// Its namespace (empty for an unprefixed attribute).
    pub namespace: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub name: QName,
    /// The namespace its name is in (empty for none).
    pub namespace: String,
    /// The namespaces declared on it: (prefix, empty for the default; URI).
    pub namespaces: Vec<(String, String)>,
    pub attrs: Vec<Attr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Element(Element),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub parent: Option<usize>,
    pub kind: Kind,
    pub children: Vec<usize>,
}

/// A document: its nodes, the root element first.
#[derive(Debug, Clone)]
pub struct Doc {
    nodes: Vec<Node>,
}

/// The namespace of the `xml` prefix, bound in every document.
pub const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

impl Doc {
    /// Reads `text`, within the limits.
    pub fn parse(text: &str) -> Result<Doc, XmlError> {
        let mut reader = quick_xml::Reader::from_str(text);
        reader.config_mut().check_end_names = true;
        let mut nodes: Vec<Node> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let malformed = |reader: &quick_xml::Reader<&[u8]>, reason: String| XmlError::Malformed {
            offset: reader.buffer_position(),
            reason,
        };
        let mut pending_text = String::new();
        let mut attributes = 0usize;
        let mut declarations = 0usize;
        loop {
            let event = reader
                .read_event()
                .map_err(|e| malformed(&reader, e.to_string()))?;
            if !matches!(
                event,
                Event::Text(_) | Event::GeneralRef(_) | Event::CData(_)
            ) && !pending_text.is_empty()
            {
                let text = std::mem::take(&mut pending_text);
                if let Some(&parent) = open.last() {
                    push(&mut nodes, Some(parent), Kind::Text(text))?;
                }
                // Text outside the root is whitespace (else quick-xml's reader or the check
                // below refuses it) and is not part of the document's infoset.
            }
            match event {
                Event::Start(start) | Event::Empty(start) if open.len() >= MAX_DEPTH => {
                    let _ = start;
                    return Err(XmlError::TooDeep);
                }
                Event::Start(ref start) | Event::Empty(ref start) => {
                    if open.is_empty() && !nodes.is_empty() {
                        return Err(malformed(&reader, "a second root element".into()));
                    }
                    let raw = start.name().0.to_string();
                    let mut namespaces = Vec::new();
                    let mut attrs = Vec::new();
                    for a in start.attributes() {
                        let a = a.map_err(|e| malformed(&reader, e.to_string()))?;
                        let key = a.key.0.to_string();
                        let value = a
                            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                            .map_err(|e| match e {
                                quick_xml::Error::Escape(
                                    quick_xml::escape::EscapeError::UnrecognizedEntity(_, name),
                                ) => XmlError::Entity(name),
                                e => malformed(&reader, e.to_string()),
                            })?
                            .into_owned();
                        if key == "xmlns" || key.starts_with("xmlns:") {
                            declarations += 1;
                            if declarations > MAX_NAMESPACES {
                                return Err(XmlError::TooManyNamespaces);
                            }
                            let prefix = key.strip_prefix("xmlns:").unwrap_or_default();
                            namespaces.push((prefix.to_string(), value));
                        } else {
                            attributes += 1;
                            if attributes > MAX_ATTRIBUTES {
                                return Err(XmlError::TooManyAttributes);
                            }
                            attrs.push((key, value));
                        }
                    }
                    let parent = open.last().copied();
                    let index = push(
                        &mut nodes,
                        parent,
                        Kind::Element(Element {
                            name: QName::parse(&raw),
                            namespace: String::new(),
                            namespaces,
                            attrs: Vec::new(),
                        }),
                    )?;
                    // The names resolved once the element's own declarations are known.
                    let name = QName::parse(&raw);
                    let namespace = if name.prefix.is_empty() {
                        lookup(&nodes, index, "").unwrap_or_default().to_string()
                    } else {
                        lookup(&nodes, index, &name.prefix)
                            .ok_or_else(|| XmlError::UnboundPrefix(name.prefix.clone()))?
                            .to_string()
                    };
                    let mut resolved = Vec::with_capacity(attrs.len());
                    for (key, value) in attrs {
                        let name = QName::parse(&key);
                        let namespace = if name.prefix.is_empty() {
                            String::new()
                        } else {
                            lookup(&nodes, index, &name.prefix)
                                .ok_or_else(|| XmlError::UnboundPrefix(name.prefix.clone()))?
                                .to_string()
                        };
                        resolved.push(Attr {
                            name,
                            namespace,
                            value,
                        });
                    }
                    if let Kind::Element(e) = &mut nodes[index].kind {
                        e.namespace = namespace;
                        e.attrs = resolved;
                    }
                    if matches!(event, Event::Start(_)) {
                        open.push(index);
                    }
                }
                Event::End(_) => {
                    open.pop();
                }
                Event::Text(t) => {
                    let text = t.xml10_content();
                    if open.is_empty() {
                        if !text.trim_matches(['\t', '\n', '\r', ' ']).is_empty() {
                            return Err(malformed(&reader, "text outside the root element".into()));
                        }
                    } else {
                        pending_text.push_str(&text);
                    }
                }
                Event::CData(c) => {
                    let raw = c.xml10_content().into_owned();
                    if open.is_empty() {
                        return Err(malformed(&reader, "CDATA outside the root element".into()));
                    }
                    pending_text.push_str(&raw);
                }
                Event::GeneralRef(r) => {
                    let name = r.xml10_content().into_owned();
                    let c = resolve_reference(&name).ok_or(XmlError::Entity(name))?;
                    pending_text.push(c);
                }
                Event::DocType(_) => return Err(XmlError::Dtd),
                Event::Comment(_) | Event::PI(_) | Event::Decl(_) => {}
                Event::Eof => break,
            }
        }
        if !open.is_empty() || nodes.is_empty() {
            return Err(XmlError::Malformed {
                offset: text.len() as u64,
                reason: "the document ends before its root element does".into(),
            });
        }
        Ok(Doc { nodes })
    }

    /// The root element.
    pub fn root(&self) -> usize {
        0
    }

    pub fn node(&self, n: usize) -> &Node {
        &self.nodes[n]
    }

    /// The element `n` is, where it is one.
    pub fn element(&self, n: usize) -> Option<&Element> {
        match &self.nodes.get(n)?.kind {
            Kind::Element(e) => Some(e),
            Kind::Text(_) => None,
        }
    }

    /// True where `n` is the element `local` of namespace `ns`.
    pub fn is(&self, n: usize, ns: &str, local: &str) -> bool {
        self.element(n)
            .is_some_and(|e| e.namespace == ns && e.name.local == local)
    }

    /// The child elements of `n`.
    pub fn children(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        self.nodes[n]
            .children
            .iter()
            .copied()
            .filter(|&c| matches!(self.nodes[c].kind, Kind::Element(_)))
    }

    /// The child elements of `n` named `local` in `ns`.
    pub fn children_named<'a>(
        &'a self,
        n: usize,
        ns: &'a str,
        local: &'a str,
    ) -> impl Iterator<Item = usize> + 'a {
        self.children(n).filter(move |&c| self.is(c, ns, local))
    }

    /// The one child element of `n` named `local` in `ns`: `None` where there is none or more.
    pub fn only_child(&self, n: usize, ns: &str, local: &str) -> Option<usize> {
        let mut found = self.children_named(n, ns, local);
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The value of `n`'s attribute `local` in `ns` (empty for an unprefixed one).
    pub fn attr(&self, n: usize, ns: &str, local: &str) -> Option<&str> {
        self.element(n)?
            .attrs
            .iter()
            .find(|a| a.namespace == ns && a.name.local == local)
            .map(|a| a.value.as_str())
    }

    /// The text of `n`'s text children, trimmed of XML white space.
    pub fn text(&self, n: usize) -> String {
        let mut out = String::new();
        for &c in &self.nodes[n].children {
            if let Kind::Text(t) = &self.nodes[c].kind {
                out.push_str(t);
            }
        }
        out.trim_matches(['\t', '\n', '\r', ' ']).to_string()
    }

    /// Every element, in document order.
    pub fn elements(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&n| matches!(self.nodes[n].kind, Kind::Element(_)))
    }

    /// The elements whose attribute `local` of namespace `ns` is `value` (several where a
    /// document repeats an id, which a signature check refuses).
    pub fn with_attr(&self, ns: &str, local: &str, value: &str) -> Vec<usize> {
        self.elements()
            .filter(|&n| self.attr(n, ns, local) == Some(value))
            .collect()
    }
}

/// The namespace `prefix` (empty: the default) is bound to at node `n`.
fn lookup<'a>(nodes: &'a [Node], n: usize, prefix: &str) -> Option<&'a str> {
    if prefix == "xml" {
        return Some(XML_NS);
    }
    let mut at = Some(n);
    while let Some(i) = at {
        if let Kind::Element(e) = &nodes[i].kind
            && let Some((_, uri)) = e.namespaces.iter().find(|(p, _)| p == prefix)
        {
            return Some(uri);
        }
        at = nodes[i].parent;
    }
    None
}

/// Adds a node under `parent`, within [`MAX_NODES`].
fn push(nodes: &mut Vec<Node>, parent: Option<usize>, kind: Kind) -> Result<usize, XmlError> {
    if nodes.len() >= MAX_NODES {
        return Err(XmlError::TooLarge);
    }
    let index = nodes.len();
    nodes.push(Node {
        parent,
        kind,
        children: Vec::new(),
    });
    if let Some(p) = parent {
        nodes[p].children.push(index);
    }
    Ok(index)
}

/// The character a reference stands for: one of the five predefined entities, or a character
/// reference (`#65`, `#x41`).
fn resolve_reference(name: &str) -> Option<char> {
    match name {
        "lt" => Some('<'),
        "gt" => Some('>'),
        "amp" => Some('&'),
        "apos" => Some('\''),
        "quot" => Some('"'),
        _ => {
            let number = name.strip_prefix('#')?;
            let code = match number.strip_prefix('x') {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(code).filter(|&c| c != '\0')
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_through_the_declarations_in_scope() {
        let doc = Doc::parse(
            r#"<?xml version="1.0"?><a:r xmlns:a="urn:a" xmlns="urn:d"><c x="1" a:y="2">t&amp;&#x41;</c></a:r>"#,
        )
        .unwrap();
        let r = doc.root();
        assert!(doc.is(r, "urn:a", "r"));
        let c = doc.only_child(r, "urn:d", "c").unwrap();
        assert_eq!(doc.attr(c, "", "x"), Some("1"));
        assert_eq!(doc.attr(c, "urn:a", "y"), Some("2"));
        assert_eq!(doc.text(c), "t&A");
    }

    #[test]
    fn hostile_documents_are_refused() {
        let dtd = r#"<!DOCTYPE r [<!ENTITY x "xxxxxxxx">]><r>&x;</r>"#;
        assert_eq!(Doc::parse(dtd).unwrap_err(), XmlError::Dtd);
        assert!(matches!(Doc::parse("<r>&x;</r>"), Err(XmlError::Entity(_))));
        let deep = "<a>".repeat(MAX_DEPTH + 1) + &"</a>".repeat(MAX_DEPTH + 1);
        assert_eq!(Doc::parse(&deep).unwrap_err(), XmlError::TooDeep);
        let wide = format!("<r>{}</r>", "<a/>".repeat(MAX_NODES));
        assert_eq!(Doc::parse(&wide).unwrap_err(), XmlError::TooLarge);
        // Each name is looked up through the declarations in scope: their number is bounded,
        // and so is the attributes'.
        let declared: String = (0..=MAX_NAMESPACES)
            .map(|k| format!(" xmlns:p{k}=\"u\""))
            .collect();
        let many = format!("<r{declared}/>");
        assert_eq!(Doc::parse(&many).unwrap_err(), XmlError::TooManyNamespaces);
        let nested = format!(
            "<r>{}</r>",
            (0..=MAX_NAMESPACES)
                .map(|k| format!("<a xmlns:p{k}=\"u\"/>"))
                .collect::<String>()
        );
        assert_eq!(
            Doc::parse(&nested).unwrap_err(),
            XmlError::TooManyNamespaces
        );
        let attributes: String = (0..=MAX_ATTRIBUTES)
            .map(|k| format!(" a{k}=\"\""))
            .collect();
        let many = format!("<r{attributes}/>");
        assert_eq!(Doc::parse(&many).unwrap_err(), XmlError::TooManyAttributes);
        assert!(matches!(
            Doc::parse("<p:r/>"),
            Err(XmlError::UnboundPrefix(_))
        ));
        assert!(Doc::parse("<r></s>").is_err());
        assert!(Doc::parse("<r/><s/>").is_err());
        assert!(Doc::parse("<r>").is_err());
    }

    #[test]
    fn line_ends_and_attribute_values_are_normalized_as_a_processor_does() {
        let doc = Doc::parse("<r a=\"x\ty\r\nz\">1\r\n2\r3<![CDATA[<\r\n>]]></r>").unwrap();
        assert_eq!(doc.attr(0, "", "a"), Some("x y z"));
        assert_eq!(doc.text(0), "1\n2\n3<\n>");
    }
}
