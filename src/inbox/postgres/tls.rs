//! TLS for the PostgreSQL inbox with rustls, by libpq's settings: `sslmode` (`disable`,
//! `prefer`, `require`, `verify-ca`, `verify-full`) and `sslrootcert`, which the driver does not
//! know beyond `disable`, `prefer` and `require`.

use crate::inbox::location::is_url;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified};
use rustls::pki_types::CertificateDer;

use crate::inbox::InboxError;

/// How the server's certificate is checked, by libpq's `sslmode` (and `sslrootcert`).
#[derive(Clone)]
pub(super) enum Verify {
    /// `prefer` (the default) and `require`: encrypted, the certificate not checked, as libpq
    /// does (it trusts the network to reach the right server).
    No,
    /// `verify-ca` (and `require` given a root certificate file, as libpq does): the certificate
    /// must chain to one of `roots`. `verify-full`: and name the host connected to.
    Chain {
        roots: Arc<rustls::RootCertStore>,
        hostname: bool,
    },
}

/// The TLS connector: rustls, checking the server's certificate as `verify` says.
pub(super) fn connector(
    verify: &Verify,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let config = match verify {
        Verify::Chain {
            roots,
            hostname: true,
        } => builder
            .with_root_certificates(roots.clone())
            .with_no_client_auth(),
        Verify::Chain {
            roots,
            hostname: false,
        } => {
            let chain = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots.clone(),
                provider.clone(),
            )
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Lenient {
                    chain: Some(chain),
                    provider,
                }))
                .with_no_client_auth()
        }
        Verify::No => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Lenient {
                chain: None,
                provider,
            }))
            .with_no_client_auth(),
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The certificate check rustls does not offer as such: none at all (libpq's `prefer` and
/// `require`), or the chain without the host's name (libpq's `verify-ca`). Either way the
/// handshake must be signed by the key the certificate names.
#[derive(Debug)]
struct Lenient {
    /// `None`: the certificate is not checked.
    chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // Checked after the chain: only a name that does not match is forgiven.
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Takes libpq's TLS settings the PostgreSQL driver does not know out of a connection string:
/// `sslmode=verify-ca` and `verify-full` (it knows only `disable`, `prefer` and `require`;
/// `require` is put in their place) and `sslrootcert`, the roots to check the server's
/// certificate against. `PGSSLMODE` and `PGSSLROOTCERT` stand in where the string leaves them
/// out. As libpq: without `sslrootcert`, `~/.postgresql/root.crt` where it exists, and a check
/// asked for with no roots to check against is an error, never a silent fall back to other
/// roots; `sslrootcert=system` trusts the public web's roots (Mozilla's, built in) and then
/// always checks the host name.
pub(super) fn take_tls(text: &str) -> Result<(String, Verify), InboxError> {
    take_tls_with(text, |name| {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    })
}

fn take_tls_with(
    text: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(String, Verify), InboxError> {
    let (text, root_file) = take_param(text, "sslrootcert");
    let root_file = root_file.or_else(|| env("PGSSLROOTCERT")).or_else(|| {
        let default = format!("{}/.postgresql/root.crt", env("HOME")?);
        std::path::Path::new(&default).exists().then_some(default)
    });
    let (rest, mode) = take_param(&text, "sslmode");
    let mode = mode.or_else(|| env("PGSSLMODE"));
    let system = root_file.as_deref() == Some("system");
    let hostname = match mode.as_deref() {
        Some("verify-full") => Some(true),
        Some("verify-ca") => Some(system),
        // libpq: `require` with a root certificate file checks the chain, as `verify-ca`.
        Some("require") if root_file.is_some() => Some(system),
        _ => None,
    };
    let text = match (&mode, hostname) {
        (Some(_), Some(_)) => add_param(&rest, "sslmode", "require"),
        (Some(m), None) => add_param(&rest, "sslmode", m),
        (None, _) => rest,
    };
    let Some(hostname) = hostname else {
        return Ok((text, Verify::No));
    };
    let roots = match root_file.as_deref() {
        Some("system") => rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
        Some(file) => roots_from(file)?,
        None => {
            return Err(InboxError::BadLocation {
                reason: format!(
                    "sslmode={} checks the server's certificate, and there are no roots to check it against: name them with sslrootcert=FILE (or PGSSLROOTCERT, or put them in ~/.postgresql/root.crt), or use sslrootcert=system to trust the public web's roots",
                    mode.as_deref().unwrap_or_default()
                ),
            });
        }
    };
    Ok((
        text,
        Verify::Chain {
            roots: Arc::new(roots),
            hostname,
        },
    ))
}

/// The certificates of a PEM file, as roots to trust.
fn roots_from(file: &str) -> Result<rustls::RootCertStore, InboxError> {
    use rustls::pki_types::pem::PemObject;
    let bad = |why: String| InboxError::BadLocation {
        reason: format!("sslrootcert {file}: {why}"),
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        rustls::pki_types::CertificateDer::pem_file_iter(file).map_err(|e| bad(e.to_string()))?
    {
        roots
            .add(cert.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in it".to_string()));
    }
    Ok(roots)
}

/// Removes `key=value` from a URL's query or a `key=value` string, giving the value.
fn take_param(text: &str, key: &str) -> (String, Option<String>) {
    let prefix = format!("{key}=");
    if is_url(text) {
        let Some((base, query)) = text.split_once('?') else {
            return (text.to_string(), None);
        };
        let mut value = None;
        let kept: Vec<&str> = query
            .split('&')
            .filter(|p| match p.strip_prefix(&prefix) {
                Some(v) => {
                    value = Some(percent_decoded(v));
                    false
                }
                None => true,
            })
            .collect();
        let text = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (text, value);
    }
    // A string the driver will not parse either is left to it, to say why.
    let Some(pairs) = key_values(text) else {
        return (text.to_string(), None);
    };
    let mut value = None;
    let mut kept = Vec::new();
    for (k, v) in pairs {
        if k == key {
            value = Some(v);
        } else {
            kept.push(format!("{k}={}", quoted(&v)));
        }
    }
    (kept.join(" "), value)
}

/// The pairs of a libpq `key=value` string: spaces around `=` allowed, a value in single
/// quotes may hold spaces, a backslash escapes the next character. `None` where it is not one.
fn key_values(text: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Some(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next()?);
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// A value as a libpq `key=value` string takes it back.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Adds `key=value` to a URL's query or a `key=value` string.
fn add_param(text: &str, key: &str, value: &str) -> String {
    if is_url(text) {
        let sep = if text.contains('?') { '&' } else { '?' };
        format!("{text}{sep}{key}={value}")
    } else {
        format!("{text} {key}={value}")
    }
}

/// `%2F` and the like, in a file name given in a URL.
fn percent_decoded(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_tls_settings_are_taken_out_for_the_driver() {
        let (text, v) =
            take_tls("postgres://u@h/db?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(text, "postgres://u@h/db?sslmode=require");
        assert!(matches!(v, Verify::Chain { hostname: true, .. }));
        let (text, v) = take_tls(
            "postgres://u@h/db?sslmode=verify-ca&connect_timeout=5&sslrootcert=/etc/ssl/certs/ssl-cert-snakeoil.pem",
        )
        .unwrap();
        assert_eq!(text, "postgres://u@h/db?connect_timeout=5&sslmode=require");
        assert!(matches!(
            v,
            Verify::Chain {
                hostname: false,
                ..
            }
        ));
        let (text, v) = take_tls("host=h sslmode=prefer dbname=db").unwrap();
        assert_eq!(text, "host='h' dbname='db' sslmode=prefer");
        assert!(matches!(v, Verify::No));
        let (text, v) = take_tls("host=h dbname=db").unwrap();
        assert_eq!(text, "host='h' dbname='db'");
        assert!(matches!(v, Verify::No));
        assert!(matches!(
            take_tls("host=h sslmode=verify-ca sslrootcert='/no/such.pem'"),
            Err(InboxError::BadLocation { reason }) if reason.contains("/no/such.pem")
        ));
        assert_eq!(
            take_param("postgres://h/db?sslrootcert=%2Fetc%2Fca.pem", "sslrootcert"),
            (
                "postgres://h/db".to_string(),
                Some("/etc/ca.pem".to_string())
            )
        );
        assert_eq!(percent_decoded("a%zz%4"), "a%zz%4");
    }

    #[test]
    fn a_check_without_roots_is_refused_not_made_against_other_roots() {
        let none = |_: &str| None;
        for mode in ["verify-ca", "verify-full"] {
            let text = format!("host=h sslmode={mode}");
            assert!(
                matches!(take_tls_with(&text, none), Err(InboxError::BadLocation { reason }) if reason.contains("sslrootcert")),
                "{mode}"
            );
        }
        // `require` without roots stays unchecked, as libpq's.
        assert!(matches!(
            take_tls_with("host=h sslmode=require", none),
            Ok((_, Verify::No))
        ));
        // `system`: the web's roots, and the host name checked even for verify-ca.
        assert!(matches!(
            take_tls_with("host=h sslmode=verify-ca sslrootcert=system", none),
            Ok((_, Verify::Chain { hostname: true, .. }))
        ));
        let env = |name: &str| (name == "PGSSLMODE").then(|| "verify-ca".to_string());
        assert!(take_tls_with("host=h", env).is_err());
    }

    #[test]
    fn key_value_strings_keep_quoted_values_whole() {
        let (text, mode) = take_param(
            r"password='top  secret\'s' sslmode = verify-ca host=h\ x",
            "sslmode",
        );
        assert_eq!(mode.as_deref(), Some("verify-ca"));
        assert_eq!(text, r"password='top  secret\'s' host='h x'");
        assert_eq!(key_values("host"), None);
        assert_eq!(key_values("password='open"), None);
    }
}
