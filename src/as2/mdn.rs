//! The MDN (RFC 3798, RFC 4130 7.4): a `multipart/report` of a human line and a
//! `message/disposition-notification`, signed (`multipart/signed`, our key, the digest the
//! partner asked for) unless the partner asked for none. It is made as one MIME entity, headers
//! first: the AS2 headers and the Content-Type become the HTTP response's headers. That entity
//! is what the inbox stores with the Message-ID, so a message sent again is answered with the
//! same bytes.

use super::config::Config;
use super::smime::{self, Digest};
use crate::as4::receipt::random_id;

/// What the sender asked of its MDN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    /// The original message's id, without its angle brackets.
    pub message_id: String,
    /// Its AS2-From (the MDN's AS2-To) and AS2-To (the MDN's AS2-From), as received.
    pub as2_from: String,
    pub as2_to: String,
    /// `Disposition-Notification-To` was given: an MDN is wanted at all.
    pub wanted: bool,
    /// The digest the MDN is signed with; `None` where the partner asked for no signature.
    pub signed_with: Option<Digest>,
    /// The digest of the `Received-Content-MIC`.
    pub mic_digest: Digest,
}

impl Requested {
    /// Reads `Disposition-Notification-Options` (RFC 4130 7.3): `signed-receipt-protocol=
    /// optional|required, pkcs7-signature; signed-receipt-micalg=optional|required, sha-256`.
    /// A signature is made where the protocol names pkcs7-signature; its digest the first of
    /// the micalg list we know (SHA-256 where none is). Where a parameter marked `required`
    /// asks for what is not supported (another protocol, only digests such as MD5), the code of
    /// the failure the MDN says (RFC 4130 7.4.3, [`FAILURES`]): the message is not applied.
    pub fn options(options: Option<&str>) -> Options {
        let mut found = Options::default();
        let Some(options) = options else {
            return found;
        };
        let mut signed = false;
        for option in options.split(';') {
            let Some((name, value)) = option.split_once('=') else {
                continue;
            };
            let name = name.trim().to_ascii_lowercase();
            let value = value.to_ascii_lowercase();
            let required = value
                .split(',')
                .next()
                .is_some_and(|importance| importance.trim() == "required");
            if name == "signed-receipt-protocol" {
                signed = value.contains("pkcs7-signature");
                if required && !signed {
                    found.failure = Some("unsupported-format");
                }
            } else if name == "signed-receipt-micalg" {
                found.micalg = Digest::first_of(&value);
                if required && found.micalg.is_none() {
                    found.failure = found.failure.or(Some("unsupported-mic-algorithms"));
                }
            }
        }
        found.signed_with = signed.then(|| found.micalg.unwrap_or(Digest::Sha256));
        found
    }
}

/// What `Disposition-Notification-Options` asks for ([`Requested::options`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The digest the MDN is signed with; `None` for an unsigned MDN.
    pub signed_with: Option<Digest>,
    /// The first digest of `signed-receipt-micalg` we know.
    pub micalg: Option<Digest>,
    /// A `required` parameter that cannot be met: the failure's code ([`FAILURES`]).
    pub failure: Option<&'static str>,
}

/// The failures RFC 4130 7.4.3 names, `failed/Failure: TEXT`: a parameter the partner marked
/// `required` that cannot be met. By code (the run's lines, `--json` and the metrics) and text
/// (the MDN's `Disposition`).
pub const FAILURES: [(&str, &str); 2] = [
    ("unsupported-format", "unsupported format"),
    ("unsupported-mic-algorithms", "unsupported MIC-algorithms"),
];

/// The disposition (RFC 3798 3.2.6, RFC 4130 7.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// `processed`: committed (new, or a duplicate of what was).
    Processed,
    /// `processed/error: MODIFIER`: nothing of the message was applied.
    Error(&'static str),
    /// `failed/Failure: TEXT` ([`FAILURES`]): what the partner required of the MDN cannot be
    /// done; nothing of the message was applied.
    Failed(&'static str),
}

impl Disposition {
    /// The disposition of a refusal with `code`: a failure where [`FAILURES`] names the code,
    /// else an error with the code as its modifier.
    pub fn refusing(code: &'static str) -> Disposition {
        match FAILURES.iter().find(|(c, _)| *c == code) {
            Some((_, text)) => Disposition::Failed(text),
            None => Disposition::Error(code),
        }
    }

    /// As the run's lines say it: `processed`, `processed/error: X`, `failed/Failure: Y`.
    pub fn shown(self) -> String {
        match self {
            Disposition::Processed => "processed".into(),
            Disposition::Error(m) => format!("processed/error: {m}"),
            Disposition::Failed(t) => format!("failed/Failure: {t}"),
        }
    }

    fn text(self) -> String {
        format!("automatic-action/MDN-sent-automatically; {}", self.shown())
    }
}

/// The MDN for `requested`, as one MIME entity (headers, empty line, body). `mic` is the
/// `Received-Content-MIC` (for a processed message); `explanation` the human part.
pub fn build(
    config: &Config,
    requested: &Requested,
    disposition: Disposition,
    mic: Option<&str>,
    explanation: &str,
) -> Result<Vec<u8>, String> {
    let report_boundary = format!("report-{}", random_id());
    let mut report = Vec::new();
    let mut line = |s: &str| {
        report.extend_from_slice(s.as_bytes());
        report.extend_from_slice(b"\r\n");
    };
    line(&format!("--{report_boundary}"));
    line("Content-Type: text/plain; charset=us-ascii");
    line("Content-Transfer-Encoding: 7bit");
    line("");
    line(&ascii(explanation));
    line(&format!("--{report_boundary}"));
    line("Content-Type: message/disposition-notification");
    line("Content-Transfer-Encoding: 7bit");
    line("");
    line(&format!(
        "Reporting-UA: edi-inbox/{}",
        env!("CARGO_PKG_VERSION")
    ));
    line(&format!(
        "Original-Recipient: rfc822; {}",
        ascii(&requested.as2_to)
    ));
    line(&format!(
        "Final-Recipient: rfc822; {}",
        ascii(&requested.as2_to)
    ));
    line(&format!(
        "Original-Message-ID: <{}>",
        ascii(&requested.message_id)
    ));
    line(&format!("Disposition: {}", disposition.text()));
    if let Some(mic) = mic {
        line(&format!("Received-Content-MIC: {mic}"));
    }
    line("");
    line(&format!("--{report_boundary}--"));
    let report_type = format!(
        "multipart/report; report-type=disposition-notification; boundary=\"{report_boundary}\""
    );
    let (content_type, body) = match requested.signed_with {
        None => (report_type, report),
        Some(digest) => {
            // The signed part is the report entity, its headers in canonical form.
            let mut signed = format!("Content-Type: {report_type}\r\n\r\n").into_bytes();
            signed.extend_from_slice(&report);
            let signature = smime::sign(&signed, &config.key, &config.cert, digest)?;
            let boundary = format!("signed-{}", random_id());
            let mut body = Vec::with_capacity(signed.len() + signature.len() * 2 + 400);
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            body.extend_from_slice(&signed);
            body.extend_from_slice(format!("\r\n--{boundary}\r\n").as_bytes());
            body.extend_from_slice(
                b"Content-Type: application/pkcs7-signature; name=smime.p7s; smime-type=signed-data\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: attachment; filename=smime.p7s\r\n\r\n",
            );
            body.extend_from_slice(base64_lines(&signature).as_bytes());
            body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            (
                format!(
                    "multipart/signed; protocol=\"application/pkcs7-signature\"; micalg={}; boundary=\"{boundary}\"",
                    digest.micalg()
                ),
                body,
            )
        }
    };
    let mut entity = Vec::with_capacity(body.len() + 512);
    for (name, value) in [
        ("AS2-Version", "1.2".to_string()),
        ("AS2-From", quote(&config.as2_id)),
        ("AS2-To", quote(&requested.as2_from)),
        (
            "Message-ID",
            format!(
                "<{}@{}>",
                random_id(),
                ascii(&config.as2_id).replace(' ', "_")
            ),
        ),
        ("Date", http_date()),
        ("MIME-Version", "1.0".to_string()),
        ("Content-Type", content_type),
    ] {
        entity.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    entity.extend_from_slice(b"\r\n");
    entity.extend_from_slice(&body);
    Ok(entity)
}

/// An AS2 name in a header: quoted where it has a space, quote or backslash (RFC 4130 6.2).
pub fn quote(name: &str) -> String {
    let name = ascii(name);
    if name.contains([' ', '"', '\\']) {
        format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        name
    }
}

/// An AS2 name as a header gives it, its quotes undone.
pub fn unquote(value: &str) -> String {
    let v = value.trim();
    match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                } else {
                    out.push(c);
                }
            }
            out
        }
        None => v.to_string(),
    }
}

/// Printable ASCII only: what a partner sent is echoed into headers, never a line break.
fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

fn base64_lines(bytes: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(b64.len() + b64.len() / 76 * 2);
    for (k, chunk) in b64.as_bytes().chunks(76).enumerate() {
        if k > 0 {
            out.push_str("\r\n");
        }
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
    }
    out
}

/// The time now as RFC 5322 writes it (`Sat, 05 Dec 2026 17:12:13 +0000`).
fn http_date() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let s = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(now),
    )
    .to_string();
    // 2026-12-05T17:12:13Z
    let (date, time) = s.split_once('T').unwrap_or((&s, "00:00:00Z"));
    let mut ymd = date.split('-').map(|p| p.parse::<u32>().unwrap_or(1));
    let (y, m, d) = (
        ymd.next().unwrap_or(1970),
        ymd.next().unwrap_or(1),
        ymd.next().unwrap_or(1),
    );
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let weekday = DAYS[((now / 86_400) % 7) as usize];
    let month = MONTHS[(m.clamp(1, 12) - 1) as usize];
    format!(
        "{weekday}, {d:02} {month} {y} {} +0000",
        time.trim_end_matches('Z')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_name_the_signature_and_its_digest() {
        let options = |text: &str| {
            let o = Requested::options(Some(text));
            (o.signed_with, o.micalg, o.failure)
        };
        assert_eq!(Requested::options(None), Options::default());
        assert_eq!(
            options(
                "signed-receipt-protocol=required, pkcs7-signature; signed-receipt-micalg=optional, sha-512, sha1"
            ),
            (Some(Digest::Sha512), Some(Digest::Sha512), None)
        );
        // Optional: a digest we know is used instead.
        assert_eq!(
            options(
                "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, md5"
            ),
            (Some(Digest::Sha256), None, None)
        );
        // Required, and one of the list known: that one.
        assert_eq!(
            options(
                "signed-receipt-protocol=required, pkcs7-signature; signed-receipt-micalg=required, md5, SHA-256"
            ),
            (Some(Digest::Sha256), Some(Digest::Sha256), None)
        );
        // Required and none known; a protocol required that is not pkcs7-signature.
        assert_eq!(
            options(
                "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=required, md5"
            ),
            (
                Some(Digest::Sha256),
                None,
                Some("unsupported-mic-algorithms")
            )
        );
        assert_eq!(
            options("signed-receipt-protocol=required, pgp-signature"),
            (None, None, Some("unsupported-format"))
        );
        assert_eq!(
            options("signed-receipt-protocol=optional, pgp-signature"),
            (None, None, None)
        );
    }

    #[test]
    fn a_failure_is_said_as_rfc_4130_words_it() {
        assert_eq!(
            Disposition::refusing("unsupported-mic-algorithms").text(),
            "automatic-action/MDN-sent-automatically; failed/Failure: unsupported MIC-algorithms"
        );
        assert_eq!(
            Disposition::refusing("decryption-failed").text(),
            "automatic-action/MDN-sent-automatically; processed/error: decryption-failed"
        );
    }

    #[test]
    fn names_are_quoted_and_unquoted_as_rfc_4130_says() {
        assert_eq!(quote("A B"), "\"A B\"");
        assert_eq!(quote("AB"), "AB");
        assert_eq!(unquote("\"A \\\"B\\\"\""), "A \"B\"");
        assert_eq!(unquote(" AB "), "AB");
    }

    #[test]
    fn the_date_is_rfc_5322() {
        let d = http_date();
        assert!(d.ends_with(" +0000") && d.len() == 31, "{d}");
    }
}
