//! TLS and credentials of the brokers' connections, given one way for every broker:
//! `--tls-ca FILE` (PEM roots that replace the system's), `--tls-cert FILE` and `--tls-key FILE`
//! (a client certificate and its key, for mutual TLS), `--nats-creds FILE` and `--nats-nkey FILE`
//! (NATS's JWT and NKey credentials), each also read from `EDI_INBOX_TLS_CA`, `EDI_INBOX_TLS_CERT`,
//! `EDI_INBOX_TLS_KEY`, `EDI_INBOX_NATS_CREDS` and `EDI_INBOX_NATS_NKEY`. Secrets stay in files;
//! only the files' names are ever shown.
//!
//! rustls checks the server: its certificate must chain to the roots and name the host in the
//! URL. A handshake that fails is said in words an operator can act on ([`explain`]).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The files given for this run (kept in `settings.rs`, which every build has; what reads them
/// with rustls is here).
pub use super::settings::Tls as Settings;

impl Settings {
    /// The rustls configuration of a client: the server checked against the CA file's roots
    /// (or the system's), the client certificate presented where one is given. Every file is
    /// read now, so that a missing or unreadable one is said before anything connects.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = self.roots()?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        match (&self.cert, &self.key) {
            (None, None) => Ok(builder.with_no_client_auth()),
            (Some(cert), Some(key)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<_, _>>())
                    .map_err(|e| format!("--tls-cert: cannot read {}: {e}", cert.display()))?;
                if chain.is_empty() {
                    return Err(format!(
                        "--tls-cert: {} holds no PEM certificate",
                        cert.display()
                    ));
                }
                // rustls takes X.509 v3 only, and says of a v1 certificate (what `openssl x509
                // -req` without extensions writes) that it and its key do not go together.
                if let Some(version @ 1..=2) = x509_version(&chain[0]) {
                    return Err(format!(
                        "--tls-cert: {} is an X.509 v{version} certificate, which rustls (the TLS \
                         library here) does not accept: issue a v3 certificate (one with \
                         extensions, such as extendedKeyUsage = clientAuth)",
                        cert.display()
                    ));
                }
                // The key's error never quotes the key.
                let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    format!(
                        "--tls-key: cannot read a PEM private key from {}: {}",
                        key.display(),
                        pem_error(&e)
                    )
                })?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    format!(
                        "--tls-cert {} and --tls-key {} do not go together: {e}",
                        cert.display(),
                        key.display()
                    )
                })
            }
            (Some(_), None) => Err("--tls-cert needs --tls-key (the certificate's key)".into()),
            (None, Some(_)) => Err("--tls-key needs --tls-cert (the key's certificate)".into()),
        }
    }

    fn roots(&self) -> Result<rustls::RootCertStore, String> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some(ca) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
                    .and_then(|certs| certs.collect::<Result<_, _>>())
                    .map_err(|e| format!("--tls-ca: cannot read {}: {e}", ca.display()))?;
                let (_, refused) = roots.add_parsable_certificates(certs);
                if roots.is_empty() {
                    return Err(format!(
                        "--tls-ca: {} holds no usable PEM certificate{}",
                        ca.display(),
                        if refused > 0 {
                            " (some could not be read)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(
                        "TLS: the system has no root certificates (install ca-certificates, or name the broker's CA with --tls-ca FILE)"
                            .into(),
                    );
                }
            }
        }
        Ok(roots)
    }

    /// The NKey seed of `--nats-nkey`, read from its file (the first line that is a seed).
    pub fn nats_nkey_seed(&self) -> Result<Option<String>, String> {
        let Some(path) = &self.nats_nkey else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--nats-nkey: cannot read {}: {e}", path.display()))?;
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with("SU") && l.len() > 2)
            .map(|l| Some(l.to_string()))
            .ok_or_else(|| {
                format!(
                    "--nats-nkey: {} holds no user NKey seed (a line starting with SU)",
                    path.display()
                )
            })
    }

    /// The `.creds` file of `--nats-creds`, read (a JWT and an NKey seed, as `nsc` writes it).
    pub fn nats_creds_text(&self) -> Result<Option<String>, String> {
        let Some(path) = &self.nats_creds else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--nats-creds: cannot read {}: {e}", path.display()))?;
        if !text.contains("-----BEGIN NATS USER JWT-----")
            || !text.contains("-----BEGIN USER NKEY SEED-----")
        {
            return Err(format!(
                "--nats-creds: {} is not a .creds file (a NATS USER JWT and a USER NKEY SEED)",
                path.display()
            ));
        }
        Ok(Some(text))
    }
}

/// The X.509 version (1, 2 or 3) of a DER certificate, read from the first field of its
/// TBSCertificate (`[0] EXPLICIT Version DEFAULT v1`: absent in a v1 certificate); `None` where
/// the bytes are no certificate (rustls says what is wrong with those).
fn x509_version(der: &[u8]) -> Option<u8> {
    // The contents of the DER value at the start of `der`, where it has tag `tag`.
    fn contents(der: &[u8], tag: u8) -> Option<&[u8]> {
        let (&found, rest) = der.split_first()?;
        let (&first, rest) = rest.split_first()?;
        if found != tag {
            return None;
        }
        let (len, rest) = match first {
            0..=0x7F => (usize::from(first), rest),
            0x81..=0x84 => {
                let n = usize::from(first & 0x7F);
                let len = rest.get(..n)?;
                let len = len.iter().fold(0, |a, b| a << 8 | usize::from(*b));
                (len, &rest[n..])
            }
            _ => return None,
        };
        rest.get(..len)
    }
    let tbs = contents(contents(der, 0x30)?, 0x30)?;
    if tbs.first() != Some(&0xA0) {
        return Some(1);
    }
    match contents(contents(tbs, 0xA0)?, 0x02)? {
        [v @ 0..=2] => Some(v + 1),
        _ => None,
    }
}

/// A PEM error without the bytes it read.
fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::Io(io) => io.to_string(),
        E::NoItemsFound => "no private key in it".into(),
        _ => "not a PEM private key".into(),
    }
}

/// The TLS failure in `text` (a client library's error, which quotes rustls's) said as what the
/// operator can do about it; `None` where it is no TLS failure.
pub fn explain(text: &str, settings: &Settings, host: &str) -> Option<String> {
    let has = |s: &str| text.contains(s);
    let why = if has("UnknownIssuer") || has("unknown issuer") {
        format!(
            "the broker's certificate is not signed by a CA trusted here (tried {}); name its CA with --tls-ca FILE",
            settings.roots_shown()
        )
    } else if has("NotValidForName") || has("not valid for name") {
        format!(
            "the broker's certificate does not name the host {host}: connect by a name it holds"
        )
    } else if has("Expired") || has("expired") {
        "the broker's certificate has expired (or the clock here is wrong)".to_string()
    } else if has("NotValidYet") {
        "the broker's certificate is not valid yet (or the clock here is wrong)".to_string()
    } else if settings.cert.is_none()
        && (has("CertificateRequired") || has("HandshakeFailure") || has("BadCertificate"))
    {
        // TLS 1.3 servers say "certificate required", TLS 1.2 ones "bad certificate" or a
        // failed handshake: with no certificate given, each means one is wanted.
        "the broker wants a client certificate: give --tls-cert FILE and --tls-key FILE".into()
    } else if has("UnknownCA")
        || has("BadCertificate")
        || has("DecryptError")
        || has("CertificateRequired")
        || has("HandshakeFailure")
    {
        "the broker refused the client certificate of --tls-cert".to_string()
    } else if has("InvalidContentType") || has("CorruptMessage") || has("received corrupt message")
    {
        "the broker does not speak TLS on that port".to_string()
    } else {
        return None;
    };
    Some(format!("TLS with {host} failed: {why}"))
}

/// Rustls's server name for `host` (a name, or an address).
pub fn server_name(host: &str) -> Result<rustls::pki_types::ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    rustls::pki_types::ServerName::try_from(bare.to_string())
        .map_err(|_| format!("{host:?} is not a host name TLS can check a certificate against"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_said_in_an_operators_words_without_secrets() {
        let s = Settings {
            ca: Some("/etc/edi-inbox/ca.pem".into()),
            ..Settings::default()
        };
        let unknown = explain(
            "io error: invalid peer certificate: UnknownIssuer",
            &s,
            "mq.example",
        )
        .unwrap();
        assert!(unknown.contains("/etc/edi-inbox/ca.pem"), "{unknown}");
        assert!(
            explain("invalid peer certificate: NotValidForName", &s, "mq")
                .unwrap()
                .contains("does not name the host mq")
        );
        assert!(
            explain("received fatal alert: CertificateRequired", &s, "mq")
                .unwrap()
                .contains("--tls-cert")
        );
        assert!(
            explain("invalid peer certificate: Expired", &s, "mq")
                .unwrap()
                .contains("expired")
        );
        assert_eq!(explain("connection refused", &s, "mq"), None);
        let none = Settings::default();
        assert!(
            explain("UnknownIssuer", &none, "mq")
                .unwrap()
                .contains("the system's roots")
        );
    }

    /// The version of a certificate, where a v1 certificate (no version field) is what rustls
    /// refuses; rcgen's (and most) are v3.
    #[test]
    fn a_certificates_x509_version_is_read() {
        // Certificate { TBSCertificate { [version], serial ... } ... }, lengths as they stand.
        let v1 = [0x30, 0x06, 0x30, 0x03, 0x02, 0x01, 0x07, 0x00];
        let v3 = [
            0x30, 0x0A, 0x30, 0x08, 0xA0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x01, 0x07,
        ];
        assert_eq!(x509_version(&v1), Some(1));
        assert_eq!(x509_version(&v3[..]), Some(3));
        let mut v2 = v3;
        v2[8] = 0x01;
        assert_eq!(x509_version(&v2), Some(2));
        // Long-form lengths, as every real certificate has.
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["edi-inbox".to_string()]).unwrap();
        let made = params.self_signed(&key).unwrap();
        assert_eq!(x509_version(made.der()), Some(3));
        for broken in [
            &[][..],
            &[0x30],
            &[0x31, 0x00],
            &[0x30, 0x85, 0, 0, 0, 0, 1],
        ] {
            assert_eq!(x509_version(broken), None, "{broken:?}");
        }
    }

    #[test]
    fn files_are_checked_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Settings {
            ca: Some(dir.path().join("none.pem")),
            ..Settings::default()
        };
        let e = missing.client_config().unwrap_err();
        assert!(e.starts_with("--tls-ca: cannot read"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = Settings {
            ca: Some(empty.clone()),
            ..Settings::default()
        }
        .client_config()
        .unwrap_err();
        assert!(e.contains("holds no usable PEM certificate"), "{e}");
        let half = Settings {
            cert: Some(empty.clone()),
            ..Settings::default()
        };
        assert!(
            half.client_config()
                .unwrap_err()
                .contains("needs --tls-key")
        );
        let seed = dir.path().join("user.nk");
        std::fs::write(&seed, "# seed\nSUAEXAMPLESEED\n").unwrap();
        let s = Settings {
            nats_nkey: Some(seed),
            nats_creds: Some(empty),
            ..Settings::default()
        };
        assert_eq!(
            s.nats_nkey_seed().unwrap().as_deref(),
            Some("SUAEXAMPLESEED")
        );
        let e = s.nats_creds_text().unwrap_err();
        assert!(
            e.contains("is not a .creds file") && !e.contains("not a certificate"),
            "{e}"
        );
        assert_eq!(s.given(), vec!["--nats-creds", "--nats-nkey"]);
    }
}
