//! `--as4-config FILE`: who we are (our party id, the key that decrypts and signs, its
//! certificate) and the partners we take messages from (each its party id and the certificate it
//! signs with, pinned). TOML:
//!
//! ```toml
//! [own]
//! party_id = "PTE000002"
//! key = "/etc/edi-inbox/as4.key.pem"     # PKCS#8 RSA key
//! cert = "/etc/edi-inbox/as4.cert.pem"
//!
//! [[partner]]
//! party_id = "PTE000001"
//! cert = "/etc/edi-inbox/partners/PTE000001.pem"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::wss::{Keys, Partner};

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
    party_id: String,
    key: PathBuf,
    cert: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartnerEntry {
    party_id: String,
    cert: PathBuf,
}

/// The configuration, its files read.
pub struct Config {
    pub party_id: String,
    pub keys: Keys,
    /// When each certificate it names stops being valid.
    pub certificates: Vec<Expiry>,
}

/// A certificate a configuration names, and when it stops being valid (its notAfter): a
/// partner's signature checked against an expired certificate, or ours, is what breaks a
/// partner's deliveries on a given day, said before that day (`receive` warns at start and
/// writes it in the metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiry {
    /// Which one: `own.cert`, `partner ACME`, `partner ACME encryption_cert`.
    pub certificate: String,
    /// Its notAfter, in seconds since 1970.
    pub not_after: i64,
}

/// The notAfter of `cert`, in seconds since 1970.
pub(crate) fn not_after(cert: &openssl::x509::X509Ref) -> Result<i64, String> {
    let epoch = openssl::asn1::Asn1Time::from_unix(0).map_err(|e| e.to_string())?;
    let d = epoch.diff(cert.not_after()).map_err(|e| e.to_string())?;
    Ok(i64::from(d.days) * 86_400 + i64::from(d.secs))
}

/// Reads the configuration and every file it names; the error says which file and why
/// (never a key's bytes).
pub fn read(path: &Path) -> Result<Config, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--as4-config {shown}: {e}"))?;
    let file: File = toml::from_str(&text).map_err(|e| format!("--as4-config {shown}: {e}"))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let own_key_path = resolve(&file.own.key);
    let pem = std::fs::read(&own_key_path).map_err(|e| {
        format!(
            "--as4-config {shown}: own.key {}: {e}",
            own_key_path.display()
        )
    })?;
    let own_key = openssl::pkey::PKey::private_key_from_pem(&pem).map_err(|_| {
        format!(
            "--as4-config {shown}: own.key {} is not a PEM private key",
            own_key_path.display()
        )
    })?;
    if own_key.rsa().is_err() {
        return Err(format!(
            "--as4-config {shown}: own.key {} is not an RSA key (the eDelivery AS4 1.x profile signs and decrypts with RSA)",
            own_key_path.display()
        ));
    }
    let own_cert = certificate(
        "--as4-config",
        &resolve(&file.own.cert),
        &shown.to_string(),
        "own.cert",
    )?;
    let own_public = own_cert
        .public_key()
        .map_err(|e| format!("--as4-config {shown}: own.cert: {e}"))?;
    if !own_public.public_eq(&own_key) {
        return Err(format!(
            "--as4-config {shown}: own.key is not the key of own.cert"
        ));
    }
    if file.partner.is_empty() {
        return Err(format!(
            "--as4-config {shown}: no [[partner]]: no message could be taken"
        ));
    }
    let expiry = |certificate: String, cert: &openssl::x509::X509Ref| {
        not_after(cert)
            .map(|not_after| Expiry {
                certificate: certificate.clone(),
                not_after,
            })
            .map_err(|e| format!("--as4-config {shown}: {certificate}: its notAfter: {e}"))
    };
    let mut certificates = vec![expiry("own.cert".into(), &own_cert)?];
    let mut partners = Vec::with_capacity(file.partner.len());
    for (k, p) in file.partner.iter().enumerate() {
        let what = format!("partner {} ({})", k + 1, p.party_id);
        if partners.iter().any(|q: &Partner| q.party_id == p.party_id) {
            return Err(format!("--as4-config {shown}: {what} is there twice"));
        }
        let cert = certificate("--as4-config", &resolve(&p.cert), &shown.to_string(), &what)?;
        certificates.push(expiry(format!("partner {}", p.party_id), &cert)?);
        let key = cert
            .public_key()
            .map_err(|e| format!("--as4-config {shown}: {what}: {e}"))?;
        if key.rsa().is_err() {
            return Err(format!(
                "--as4-config {shown}: {what}: the certificate's key is not RSA"
            ));
        }
        partners.push(Partner {
            party_id: p.party_id.clone(),
            cert: cert
                .to_der()
                .map_err(|e| format!("--as4-config {shown}: {what}: {e}"))?,
            key,
        });
    }
    Ok(Config {
        party_id: file.own.party_id,
        keys: Keys {
            own_key,
            own_cert: own_cert
                .to_der()
                .map_err(|e| format!("--as4-config {shown}: own.cert: {e}"))?,
            partners,
        },
        certificates,
    })
}

/// A PEM certificate a configuration names; the error names the option (`flag`), the file and
/// what it is for. Shared by `--as4-config` and `--as2-config`.
pub(crate) fn certificate(
    flag: &str,
    path: &Path,
    config: &str,
    what: &str,
) -> Result<openssl::x509::X509, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("{flag} {config}: {what}: {}: {e}", path.display()))?;
    openssl::x509::X509::from_pem(&pem).map_err(|_| {
        format!(
            "{flag} {config}: {what}: {} is not a PEM certificate",
            path.display()
        )
    })
}
