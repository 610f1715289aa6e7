//! `--as2-config FILE`: who we are over AS2 (our AS2 name, the key that decrypts and signs the
//! MDNs, its certificate) and the partners we take messages from, one per AS2-From, each with
//! the certificate it signs with (pinned, not chained) and what it must send. TOML, in the form
//! of `--as4-config`:
//!
//! ```toml
//! [own]
//! as2_id = "EDIINBOX"
//! key = "/etc/edi-inbox/as2.key.pem"     # PEM RSA key
//! cert = "/etc/edi-inbox/as2.cert.pem"
//!
//! [[partner]]
//! as2_id = "ACME"
//! cert = "/etc/edi-inbox/partners/acme.pem"
//! require_signed = true        # default true
//! require_encrypted = false    # default false
//! require_compressed = false   # default false
//! mdn_urls = ["https://as2.acme.example/mdn"]  # where its asynchronous MDNs may go
//! ```
//!
//! `mdn_roots` in `[own]` (a PEM file) names the roots that partners' HTTPS servers are checked
//! against when their asynchronous MDNs are POSTed to them, instead of the system's.
//!
//! `encryption_cert` (the partner's encryption certificate, where it is not `cert`) is read and
//! checked: a receiver encrypts nothing to its partners (an MDN is signed, never encrypted), so
//! it serves the day edi-inbox sends.

use std::path::{Path, PathBuf};

use openssl::pkey::{PKey, Private};
use openssl::x509::X509;
use serde::Deserialize;

/// Certificates read as `--as4-config`'s are, the errors naming `--as2-config`.
fn certificate(path: &Path, config: &str, what: &str) -> Result<X509, String> {
    crate::as4::config::certificate("--as2-config", path, config, what)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    own: Own,
    #[serde(default)]
    partner: Vec<PartnerEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Own {
    as2_id: String,
    key: PathBuf,
    cert: PathBuf,
    mdn_roots: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartnerEntry {
    as2_id: String,
    cert: PathBuf,
    encryption_cert: Option<PathBuf>,
    #[serde(default = "yes")]
    require_signed: bool,
    #[serde(default)]
    require_encrypted: bool,
    #[serde(default)]
    require_compressed: bool,
    /// Where this partner's asynchronous MDNs may go: URL prefixes (scheme, host and port the
    /// same, the path starting with the prefix's). Absent: any http(s) URL.
    mdn_urls: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// A partner, its certificates read.
pub struct Partner {
    pub as2_id: String,
    pub cert: X509,
    pub require_signed: bool,
    pub require_encrypted: bool,
    pub require_compressed: bool,
    /// `mdn_urls`: where its asynchronous MDNs may go (`None`: anywhere over http(s)).
    pub mdn_urls: Option<Vec<String>>,
}

/// The configuration, its files read.
pub struct Config {
    pub as2_id: String,
    pub key: PKey<Private>,
    pub cert: X509,
    pub partners: Vec<Partner>,
    /// `own.mdn_roots`, resolved: the roots of the partners' HTTPS servers, where not the
    /// system's.
    pub mdn_roots: Option<PathBuf>,
    /// When each certificate it names stops being valid.
    pub certificates: Vec<crate::as4::config::Expiry>,
}

impl Config {
    /// The partner whose AS2 name is `as2_id` (compared exactly, as RFC 4130 6.2 says).
    pub fn partner(&self, as2_id: &str) -> Option<&Partner> {
        self.partners.iter().find(|p| p.as2_id == as2_id)
    }
}

/// An AS2 name as RFC 4130 6.2 allows it: 1 to 128 printable ASCII characters.
fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Reads the configuration and every file it names; the error says which file and why (never
/// a key's bytes).
pub fn read(path: &Path) -> Result<Config, String> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--as2-config {shown}: {e}"))?;
    let file: File = toml::from_str(&text).map_err(|e| format!("--as2-config {shown}: {e}"))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    if !valid_name(&file.own.as2_id) {
        return Err(format!(
            "--as2-config {shown}: own.as2_id must be 1 to 128 printable ASCII characters"
        ));
    }
    let key_path = resolve(&file.own.key);
    let pem = std::fs::read(&key_path)
        .map_err(|e| format!("--as2-config {shown}: own.key {}: {e}", key_path.display()))?;
    let key = PKey::private_key_from_pem(&pem).map_err(|_| {
        format!(
            "--as2-config {shown}: own.key {} is not a PEM private key",
            key_path.display()
        )
    })?;
    if key.rsa().is_err() {
        return Err(format!(
            "--as2-config {shown}: own.key {} is not an RSA key (AS2 decrypts and signs with RSA)",
            key_path.display()
        ));
    }
    let cert = certificate(&resolve(&file.own.cert), &shown, "own.cert")?;
    let public = cert
        .public_key()
        .map_err(|e| format!("--as2-config {shown}: own.cert: {e}"))?;
    if !public.public_eq(&key) {
        return Err(format!(
            "--as2-config {shown}: own.key is not the key of own.cert"
        ));
    }
    if file.partner.is_empty() {
        return Err(format!(
            "--as2-config {shown}: no [[partner]]: no message could be taken"
        ));
    }
    let expiry = |certificate: String, cert: &openssl::x509::X509Ref| {
        crate::as4::config::not_after(cert)
            .map(|not_after| crate::as4::config::Expiry {
                certificate: certificate.clone(),
                not_after,
            })
            .map_err(|e| format!("--as2-config {shown}: {certificate}: its notAfter: {e}"))
    };
    let mut certificates = vec![expiry("own.cert".into(), &cert)?];
    let mut partners: Vec<Partner> = Vec::with_capacity(file.partner.len());
    for (k, p) in file.partner.iter().enumerate() {
        let what = format!("partner {} ({})", k + 1, p.as2_id);
        if !valid_name(&p.as2_id) {
            return Err(format!(
                "--as2-config {shown}: {what}: as2_id must be 1 to 128 printable ASCII characters"
            ));
        }
        if partners.iter().any(|q| q.as2_id == p.as2_id) {
            return Err(format!("--as2-config {shown}: {what} is there twice"));
        }
        let cert = certificate(&resolve(&p.cert), &shown, &what)?;
        certificates.push(expiry(format!("partner {}", p.as2_id), &cert)?);
        // Read and checked, not kept (see the module's comment), but for when it expires.
        if let Some(c) = &p.encryption_cert {
            let encryption = certificate(&resolve(c), &shown, &format!("{what} encryption_cert"))?;
            certificates.push(expiry(
                format!("partner {} encryption_cert", p.as2_id),
                &encryption,
            )?);
        }
        if let Some(urls) = &p.mdn_urls {
            for url in urls {
                super::delivery::check_url(url)
                    .map_err(|e| format!("--as2-config {shown}: {what}: mdn_urls {url:?}: {e}"))?;
            }
        }
        partners.push(Partner {
            as2_id: p.as2_id.clone(),
            cert,
            require_signed: p.require_signed,
            require_encrypted: p.require_encrypted,
            require_compressed: p.require_compressed,
            mdn_urls: p.mdn_urls.clone(),
        });
    }
    let mdn_roots = file.own.mdn_roots.as_deref().map(resolve);
    if let Some(roots) = &mdn_roots {
        // Read now, so that a missing or unreadable file is said at start-up.
        super::delivery::mdn_tls(Some(roots))
            .map_err(|e| format!("--as2-config {shown}: own.mdn_roots: {e}"))?;
    }
    Ok(Config {
        as2_id: file.own.as2_id,
        key,
        cert,
        partners,
        mdn_roots,
        certificates,
    })
}
