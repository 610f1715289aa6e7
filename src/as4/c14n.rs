//! Exclusive XML Canonicalization 1.0, without comments (`http://www.w3.org/2001/10/xml-exc-c14n#`),
//! of one element and what it holds: the bytes a WS-Security signature's references and its
//! `SignedInfo` are digested and signed over. A namespace is written where the element or one
//! of its attributes uses its prefix (or where the transform's `InclusiveNamespaces` lists it),
//! and not already in effect from an element written above it; attributes in the order of their
//! namespace and name; text and values escaped as the recommendation says.

use std::collections::{BTreeMap, BTreeSet};

use super::xml::{Doc, Kind};

/// The canonical form of element `n` of `doc`; `inclusive` is the transform's
/// `InclusiveNamespaces PrefixList` (`#default` for the default namespace).
pub fn exclusive(doc: &Doc, n: usize, inclusive: &[String]) -> Vec<u8> {
    let inclusive: BTreeSet<&str> = inclusive
        .iter()
        .map(|p| if p == "#default" { "" } else { p.as_str() })
        .collect();
    let mut out = Vec::with_capacity(1024);
    element(doc, n, &BTreeMap::new(), &inclusive, &mut out);
    out
}

/// Every namespace in scope at `n`: prefix (empty for the default) to URI, the nearest
/// declaration winning.
fn in_scope(doc: &Doc, n: usize) -> BTreeMap<&str, &str> {
    let mut scope = BTreeMap::new();
    let mut at = Some(n);
    while let Some(i) = at {
        if let Some(e) = doc.element(i) {
            for (prefix, uri) in &e.namespaces {
                scope.entry(prefix.as_str()).or_insert(uri.as_str());
            }
        }
        at = doc.node(i).parent;
    }
    scope
}

fn element(
    doc: &Doc,
    n: usize,
    rendered: &BTreeMap<String, String>,
    inclusive: &BTreeSet<&str>,
    out: &mut Vec<u8>,
) {
    let Some(e) = doc.element(n) else {
        return;
    };
    let scope = in_scope(doc, n);
    // The prefixes this element makes visible use of, and those listed to be kept.
    let mut wanted: BTreeSet<&str> = BTreeSet::new();
    wanted.insert(e.name.prefix.as_str());
    for a in &e.attrs {
        if !a.name.prefix.is_empty() {
            wanted.insert(a.name.prefix.as_str());
        }
    }
    for p in inclusive {
        if scope.contains_key(p) {
            wanted.insert(p);
        }
    }
    let mut written: Vec<(&str, &str)> = Vec::new();
    for prefix in wanted {
        if prefix == "xml" {
            continue;
        }
        let uri = scope.get(prefix).copied().unwrap_or("");
        let current = rendered.get(prefix).map_or("", String::as_str);
        // An unbound prefix can only be the default one (xmlns=""), written where a default
        // namespace is in effect above.
        if uri != current && (prefix.is_empty() || !uri.is_empty()) {
            written.push((prefix, uri));
        }
    }
    out.push(b'<');
    out.extend_from_slice(e.name.written().as_bytes());
    for (prefix, uri) in &written {
        if prefix.is_empty() {
            out.extend_from_slice(b" xmlns=\"");
        } else {
            out.extend_from_slice(b" xmlns:");
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(b"=\"");
        }
        escape_attr(uri, out);
        out.push(b'"');
    }
    let mut attrs: Vec<&super::xml::Attr> = e.attrs.iter().collect();
    attrs.sort_by(|a, b| {
        (a.namespace.as_str(), a.name.local.as_str())
            .cmp(&(b.namespace.as_str(), b.name.local.as_str()))
    });
    for a in attrs {
        out.push(b' ');
        out.extend_from_slice(a.name.written().as_bytes());
        out.extend_from_slice(b"=\"");
        escape_attr(&a.value, out);
        out.push(b'"');
    }
    out.push(b'>');
    let mut below;
    let rendered = if written.is_empty() {
        rendered
    } else {
        below = rendered.clone();
        for (prefix, uri) in &written {
            below.insert(prefix.to_string(), uri.to_string());
        }
        &below
    };
    for &c in &doc.node(n).children {
        match &doc.node(c).kind {
            Kind::Text(t) => escape_text(t, out),
            Kind::Element(_) => element(doc, c, rendered, inclusive, out),
        }
    }
    out.extend_from_slice(b"</");
    out.extend_from_slice(e.name.written().as_bytes());
    out.push(b'>');
}

fn escape_text(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match c {
            '&' => out.extend_from_slice(b"&amp;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '\r' => out.extend_from_slice(b"&#xD;"),
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

fn escape_attr(value: &str, out: &mut Vec<u8>) {
    for c in value.chars() {
        match c {
            '&' => out.extend_from_slice(b"&amp;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '"' => out.extend_from_slice(b"&quot;"),
            '\t' => out.extend_from_slice(b"&#x9;"),
            '\n' => out.extend_from_slice(b"&#xA;"),
            '\r' => out.extend_from_slice(b"&#xD;"),
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document with what exclusive canonicalization must get right: declarations unused
    /// where they stand, a default namespace set and unset, prefixed attributes, references.
    const DOC: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope" xmlns:wsu="urn:wsu" xmlns:eb="urn:eb" xmlns:unused="urn:unused">
  <S12:Header>
    <eb:Messaging S12:mustUnderstand="true" wsu:Id="m1">
      <eb:UserMessage><eb:MessageInfo><eb:MessageId>a&amp;b&lt;c&gt;d&#13;e</eb:MessageId></eb:MessageInfo>
      <x xmlns="urn:d"><y z="1" b:q="t&#9;u&quot;v" xmlns:b="urn:b"/><w xmlns=""><v/></w></x>
      </eb:UserMessage>
    </eb:Messaging>
  </S12:Header>
  <S12:Body wsu:Id="body"/>
</S12:Envelope>"#;

    /// What lxml (libxml2) writes for the same elements: `etree.tostring(e, method="c14n",
    /// exclusive=True)`, and with `inclusive_ns_prefixes=["S12", "unused"]`.
    const MESSAGING: &str = "<eb:Messaging xmlns:S12=\"http://www.w3.org/2003/05/soap-envelope\" xmlns:eb=\"urn:eb\" xmlns:wsu=\"urn:wsu\" S12:mustUnderstand=\"true\" wsu:Id=\"m1\">\n      <eb:UserMessage><eb:MessageInfo><eb:MessageId>a&amp;b&lt;c&gt;d&#xD;e</eb:MessageId></eb:MessageInfo>\n      <x xmlns=\"urn:d\"><y xmlns:b=\"urn:b\" z=\"1\" b:q=\"t&#x9;u&quot;v\"></y><w xmlns=\"\"><v></v></w></x>\n      </eb:UserMessage>\n    </eb:Messaging>";
    const MESSAGING_INCLUSIVE: &str = "<eb:Messaging xmlns:S12=\"http://www.w3.org/2003/05/soap-envelope\" xmlns:eb=\"urn:eb\" xmlns:unused=\"urn:unused\" xmlns:wsu=\"urn:wsu\" S12:mustUnderstand=\"true\" wsu:Id=\"m1\">\n      <eb:UserMessage><eb:MessageInfo><eb:MessageId>a&amp;b&lt;c&gt;d&#xD;e</eb:MessageId></eb:MessageInfo>\n      <x xmlns=\"urn:d\"><y xmlns:b=\"urn:b\" z=\"1\" b:q=\"t&#x9;u&quot;v\"></y><w xmlns=\"\"><v></v></w></x>\n      </eb:UserMessage>\n    </eb:Messaging>";
    const BODY: &str = "<S12:Body xmlns:S12=\"http://www.w3.org/2003/05/soap-envelope\" xmlns:wsu=\"urn:wsu\" wsu:Id=\"body\"></S12:Body>";
    const ROOT: &str = "<S12:Envelope xmlns:S12=\"http://www.w3.org/2003/05/soap-envelope\">\n  <S12:Header>\n    <eb:Messaging xmlns:eb=\"urn:eb\" xmlns:wsu=\"urn:wsu\" S12:mustUnderstand=\"true\" wsu:Id=\"m1\">\n      <eb:UserMessage><eb:MessageInfo><eb:MessageId>a&amp;b&lt;c&gt;d&#xD;e</eb:MessageId></eb:MessageInfo>\n      <x xmlns=\"urn:d\"><y xmlns:b=\"urn:b\" z=\"1\" b:q=\"t&#x9;u&quot;v\"></y><w xmlns=\"\"><v></v></w></x>\n      </eb:UserMessage>\n    </eb:Messaging>\n  </S12:Header>\n  <S12:Body xmlns:wsu=\"urn:wsu\" wsu:Id=\"body\"></S12:Body>\n</S12:Envelope>";

    #[test]
    fn each_element_is_written_as_libxml2_writes_it() {
        let doc = Doc::parse(DOC).unwrap();
        let by_id = |id: &str| doc.with_attr("urn:wsu", "Id", id)[0];
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        assert_eq!(text(exclusive(&doc, by_id("m1"), &[])), MESSAGING);
        assert_eq!(
            text(exclusive(
                &doc,
                by_id("m1"),
                &["S12".into(), "unused".into()]
            )),
            MESSAGING_INCLUSIVE
        );
        assert_eq!(text(exclusive(&doc, by_id("body"), &[])), BODY);
        assert_eq!(text(exclusive(&doc, doc.root(), &[])), ROOT);
    }
}
