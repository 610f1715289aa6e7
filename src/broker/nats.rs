//! NATS, as `consume` and `publish` both reach it: a named connection with bounded waits, its
//! URL shown without credentials.

use std::time::Duration;

/// How long connecting, and a request (a stream or consumer lookup), may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The options every connection of the program starts from: named for `role`, connecting and
/// every request bounded by [`TIMEOUT`].
pub fn options(role: &str) -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::new()
        .name(super::connection_name(role))
        .connection_timeout(TIMEOUT)
        .request_timeout(Some(TIMEOUT))
}

/// For messages: the server without credentials.
pub fn shown(server: &str) -> String {
    super::without_userinfo(server)
}

/// The credentials of a connection: the URL's user part (`USER:PASS@`, or `TOKEN@`, as the
/// `nats` tool takes them) and this run's `--nats-creds` or `--nats-nkey`; and TLS with this
/// run's settings where `tls` (a connection straight to the server; one through the consumer's
/// relay has the relay speak TLS). Every file is read here, before connecting.
pub fn authorised(
    mut options: async_nats::ConnectOptions,
    url: &str,
    tls: bool,
    settings: &super::tls::Settings,
) -> Result<async_nats::ConnectOptions, String> {
    if let Some(userinfo) = userinfo(url) {
        options = match userinfo.split_once(':') {
            Some((user, pass)) => options.user_and_password(user.to_string(), pass.to_string()),
            None => options.token(userinfo.to_string()),
        };
    }
    if let Some(text) = settings.nats_creds_text()? {
        let path = settings
            .nats_creds
            .as_deref()
            .unwrap_or(std::path::Path::new(""));
        // async-nats's own error may quote the file: only its kind is shown.
        options = options.credentials(&text).map_err(|e| {
            format!(
                "--nats-creds: {} cannot be used ({:?})",
                path.display(),
                e.kind()
            )
        })?;
    }
    if let Some(seed) = settings.nats_nkey_seed()? {
        options = options.nkey(seed);
    }
    if tls {
        let demand = is_tls_url(url) || settings.wants_tls();
        match settings.client_config() {
            Ok(config) => options = options.tls_client_config(config),
            Err(e) if demand => return Err(e),
            // No roots here (a host without ca-certificates) and no TLS asked for: a server
            // that does not require it is reached as before.
            Err(_) => {}
        }
        if demand {
            options = options.require_tls(true);
        }
    }
    Ok(options)
}

/// True for a `tls://` URL (TLS whatever the server's INFO says).
pub fn is_tls_url(url: &str) -> bool {
    url.starts_with("tls://")
}

/// The user part of `url` (before `@`), where it has one.
fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .map(|(u, _)| u)
        .filter(|u| !u.is_empty())
}

/// `url` without its user part: the client is given the credentials apart.
pub fn without_credentials(url: &str) -> String {
    super::without_userinfo(url)
}

/// A failure to connect to `url`, in an operator's words: TLS refused (see
/// [`super::tls::explain`]) or the credentials refused.
pub fn explained(e: &dyn std::fmt::Display, url: &str, settings: &super::tls::Settings) -> String {
    let text = format!("{e:#}");
    let host = super::host_of_url(url);
    if let Some(why) = super::tls::explain(&text, settings, &host) {
        return why;
    }
    if text
        .to_ascii_lowercase()
        .contains("authorization violation")
    {
        return format!(
            "{host} refused the credentials (authorization violation): check the URL's user and password or token, --nats-creds or --nats-nkey"
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_part_is_a_user_and_password_or_a_token() {
        assert_eq!(userinfo("nats://edi:s3cret@h:4222"), Some("edi:s3cret"));
        assert_eq!(userinfo("tls://t0ken@h"), Some("t0ken"));
        assert_eq!(userinfo("nats://h:4222/x@y"), None);
        assert_eq!(
            without_credentials("nats://edi:s3cret@h:4222"),
            "nats://h:4222"
        );
        assert!(is_tls_url("tls://h") && !is_tls_url("nats://h"));
    }
}
