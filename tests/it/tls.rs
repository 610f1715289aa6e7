//! TLS and credentials on the brokers' connections (issue 25), against servers the tests start:
//! nats-server with TLS, mutual TLS and authorization of their own, and `stunnel4` in front of
//! the machine's RabbitMQ. The certificates are made here (rcgen): a CA, a server certificate
//! for 127.0.0.1, one for another name, a client certificate, and a second CA nobody trusts.
//! Each refusal is checked for its words, for what it did not do (nothing published, nothing
//! decided) and for the secrets it must not show.

use std::path::PathBuf;

use crate::common::RunExt;
use crate::common::site::Site;

/// The files a test's TLS needs, in a folder of its own.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Certs {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        let ca = |cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, cn);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let cert = p.self_signed(&key).unwrap();
            (cert, key)
        };
        let (ca_cert, ca_key) = ca("edi-inbox test CA");
        let (other_cert, _) = ca("a CA nobody here trusts");
        write("ca.pem", ca_cert.pem());
        write("other-ca.pem", other_cert.pem());
        let leaf = |names: &[&str], purpose: ExtendedKeyUsagePurpose, file: &str| {
            let key = KeyPair::generate().unwrap();
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let mut p = CertificateParams::new(names).unwrap();
            p.distinguished_name.push(DnType::CommonName, file);
            p.extended_key_usages = vec![purpose];
            if file == "expired" {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
            write(&format!("{file}.pem"), cert.pem());
            write(&format!("{file}.key"), key.serialize_pem());
        };
        leaf(
            &["127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            "server",
        );
        leaf(
            &["other.example"],
            ExtendedKeyUsagePurpose::ServerAuth,
            "elsewhere",
        );
        leaf(
            &["edi-inbox"],
            ExtendedKeyUsagePurpose::ClientAuth,
            "client",
        );
        leaf(
            &["127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            "expired",
        );
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// An inbox with events to publish: `(site, events)`.
fn site_with_events() -> (Site, i64) {
    let site = Site::new();
    site.fill(12, 25);
    site.ingest(100).code(0);
    let events = site.unpublished();
    assert!(events > 0, "the synthetic files gave no events");
    (site, events)
}

/// `consume --from FROM` until it has been idle 3 s, with `extra`.
fn consume(site: &Site, from: &str, extra: &[&str]) -> crate::common::Run {
    let mut args = vec!["consume", "--from", from, "--until-idle", "3s", "-q"];
    args.extend_from_slice(extra);
    site.run(&args)
}

/// The interchanges an inbox holds, by key.
fn keys(site: &Site) -> std::collections::BTreeSet<(String, String, String)> {
    site.triples("SELECT sender, recipient, control_ref FROM interchanges")
}

#[cfg(feature = "nats")]
mod nats {
    use super::*;
    use crate::common::brokers::OwnNats;
    use std::path::Path;

    /// A nats-server of the test's own with `extra` in its configuration (TLS, authorization).
    fn server(store: &Path, extra: &str) -> Option<OwnNats> {
        OwnNats::start_with(store, extra)
    }

    fn tls_block(certs: &Certs, cert: &str, verify: bool) -> String {
        let mut block = format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n",
            certs.arg(&format!("{cert}.pem")),
            certs.arg(&format!("{cert}.key"))
        );
        if verify {
            block.push_str(&format!(
                "  ca_file: \"{}\"\n  verify: true\n",
                certs.arg("ca.pem")
            ));
        }
        block.push_str("}\n");
        block
    }

    fn publish(site: &Site, to: &str, stream: &str, extra: &[&str]) -> crate::common::Run {
        // Whole interchanges, for the consuming inbox to decide as the first did.
        let mut args = vec![
            "publish",
            "--to",
            to,
            "--create-stream",
            stream,
            "--payload",
            "interchange",
        ];
        args.extend_from_slice(extra);
        site.run(&args)
    }

    /// TLS that the server requires: refused against another CA (on a `tls://` URL) and against
    /// the system's roots (on a `nats://` URL, TLS asked for by the server's INFO), nothing
    /// published; then published with the CA file, and consumed through the relay into a second
    /// inbox, the same interchanges.
    #[test]
    fn nats_over_tls_is_verified_and_refused_in_an_operators_words() {
        let certs = Certs::make();
        let Some(own) = server(&certs.path("store"), &tls_block(&certs, "server", false)) else {
            return;
        };
        let (site, events) = site_with_events();
        let tls_url = format!("tls://127.0.0.1:{}/edi", own.port);
        let run = publish(
            &site,
            &tls_url,
            "EDI_TLS",
            &["--tls-ca", &certs.arg("other-ca.pem")],
        );
        run.code(1);
        assert!(
            run.err().contains("not signed by a CA trusted here")
                && run.err().contains("other-ca.pem"),
            "{}",
            run.err()
        );
        assert_eq!(
            site.unpublished(),
            events,
            "nothing may be marked published"
        );
        let plain_url = format!("nats://127.0.0.1:{}/edi", own.port);
        let run = publish(&site, &plain_url, "EDI_TLS", &[]);
        run.code(1);
        assert!(
            run.err().contains("the system's roots"),
            "a server that requires TLS is checked against the system's roots: {}",
            run.err()
        );
        publish(
            &site,
            &plain_url,
            "EDI_TLS",
            &["--tls-ca", &certs.arg("ca.pem")],
        )
        .success();
        assert_eq!(site.unpublished(), 0);

        let from = format!("tls://127.0.0.1:{}/EDI_TLS/reader", own.port);
        let other = Site::new();
        let run = consume(&other, &from, &["--tls-ca", &certs.arg("other-ca.pem")]);
        run.code(1);
        assert!(
            run.err().contains("not signed by a CA trusted here"),
            "{}",
            run.err()
        );
        assert!(keys(&other).is_empty(), "nothing decided");
        // Through the relay on a nats:// URL: TLS because the server's INFO requires it.
        let plain_from = from.replacen("tls://", "nats://", 1);
        let run = consume(&other, &plain_from, &["--tls-ca", &certs.arg("ca.pem")]);
        run.code(0);
        assert_eq!(keys(&other), keys(&site), "{}", run.err());
    }

    /// `publish --follow` over TLS goes on after the server is killed (`kill -9`) and started
    /// again; a consumer over TLS then decides each interchange once.
    /// A fake NATS server in front of a real one: each connection passed on both ways as it
    /// is, but for the server's `INFO`, which is written again as the same JSON spaced out
    /// (`{  "server_id": "...",  "tls_required": true, ...}`, as JSON allows); the first byte
    /// the client sends after it is kept for the test (`None` where it sent nothing).
    struct SpacedInfo {
        port: u16,
        firsts: std::sync::Arc<std::sync::Mutex<Vec<Option<u8>>>>,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl SpacedInfo {
        fn start(server_port: u16) -> SpacedInfo {
            use std::sync::atomic::Ordering;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let firsts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (kept, stopped) = (firsts.clone(), stop.clone());
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let kept = kept.clone();
                    std::thread::spawn(move || {
                        let _ = SpacedInfo::relay(client, server_port, &kept);
                    });
                }
            });
            SpacedInfo { port, firsts, stop }
        }

        fn relay(
            mut client: std::net::TcpStream,
            server_port: u16,
            firsts: &std::sync::Mutex<Vec<Option<u8>>>,
        ) -> std::io::Result<()> {
            use std::io::{Read as _, Write as _};
            let mut server = std::net::TcpStream::connect(("127.0.0.1", server_port))?;
            server.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while !line.ends_with(b"\r\n") && line.len() < 64 * 1024 {
                if server.read(&mut byte)? == 0 {
                    return Ok(());
                }
                line.push(byte[0]);
            }
            server.set_read_timeout(None)?;
            let info: serde_json::Value = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.strip_prefix("INFO "))
                .and_then(|json| serde_json::from_str(json).ok())
                .expect("the server's first line is an INFO with JSON");
            assert_eq!(
                info["tls_required"], true,
                "the server behind the fake requires TLS"
            );
            // Pretty JSON with its line breaks taken out: a line still, every colon spaced.
            let spaced = serde_json::to_string_pretty(&info)
                .unwrap()
                .replace('\n', "");
            assert!(spaced.contains("\"tls_required\": true"), "{spaced}");
            client.write_all(format!("INFO {spaced}\r\n").as_bytes())?;
            let mut down = server.try_clone()?;
            let mut to_client = client.try_clone()?;
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut down, &mut to_client);
                let _ = to_client.shutdown(std::net::Shutdown::Both);
            });
            let mut first = [0u8; 4096];
            let n = client.read(&mut first)?;
            firsts.lock().unwrap().push(first[..n].first().copied());
            server.write_all(&first[..n])?;
            let _ = std::io::copy(&mut client, &mut server);
            server.shutdown(std::net::Shutdown::Both)
        }

        /// The first byte the client sent after the `INFO`, for each connection.
        fn firsts(&self) -> Vec<Option<u8>> {
            self.firsts.lock().unwrap().clone()
        }
    }

    impl Drop for SpacedInfo {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
            // The accepting thread wakes to see it.
            let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        }
    }

    /// Issue 38, item 9: the relay read the server's `INFO` for `"tls_required":true` as that
    /// very text, so a server that writes `"tls_required": true` was taken for one without TLS,
    /// and a consume asked for TLS was refused ("the server does not offer TLS"). Through a
    /// fake server that spaces out the JSON of a nats-server requiring TLS, the relay answers
    /// the `INFO` with a TLS handshake on every connection, and the consumer takes the same
    /// interchanges as with the compact spelling
    /// (`nats_over_tls_is_verified_and_refused_in_an_operators_words`).
    #[test]
    fn an_info_spaced_out_goes_to_tls_as_a_compact_one() {
        let certs = Certs::make();
        let Some(own) = server(&certs.path("store"), &tls_block(&certs, "server", false)) else {
            return;
        };
        let (site, _) = site_with_events();
        let ca = certs.arg("ca.pem");
        let to = format!("tls://127.0.0.1:{}/edi", own.port);
        publish(&site, &to, "EDI_SPACED", &["--tls-ca", &ca]).success();
        assert_eq!(site.unpublished(), 0);
        let fake = SpacedInfo::start(own.port);
        let from = format!("nats://127.0.0.1:{}/EDI_SPACED/reader", fake.port);
        let other = Site::new();
        let run = consume(&other, &from, &["--tls-ca", &ca]);
        run.code(0);
        assert_eq!(keys(&other), keys(&site), "{}", run.err());
        let firsts = fake.firsts();
        assert!(
            !firsts.is_empty() && firsts.iter().all(|b| *b == Some(0x16)),
            "the relay must answer the spaced INFO with a TLS handshake record (0x16) on every \
             connection; the first bytes after it were {firsts:?}"
        );
    }

    #[test]
    fn follow_over_tls_survives_a_server_killed_and_started_again() {
        use crate::common::StartExt;
        use std::time::{Duration, Instant};
        let certs = Certs::make();
        let Some(mut own) = server(&certs.path("store"), &tls_block(&certs, "server", false))
        else {
            return;
        };
        let site = Site::new();
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        site.ingest_quietly(&[]).code(0);
        let ca = certs.arg("ca.pem");
        let to = format!("tls://127.0.0.1:{}/edi", own.port);
        let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"))
            .arg("--db")
            .arg(site.db_arg())
            .args(["publish", "--follow", "--poll", "100ms", "-q", "--to", &to])
            .args(["--create-stream", "EDI_FOLLOW", "--payload", "interchange"])
            .args(["--tls-ca", &ca])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .start();
        let wait = |what: &dyn Fn() -> bool| {
            let until = Instant::now() + Duration::from_secs(90);
            while !what() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
            what()
        };
        assert!(
            wait(&|| site.unpublished() == 0),
            "the first events went out"
        );
        own.kill();
        for sample in ["invoic-d96a-unoc-crlf.edi", "desadv-d07a-groups-v4.edi"] {
            site.put_sample(&format!("valid/{sample}"), sample);
        }
        site.ingest_quietly(&[]).code(0);
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            site.unpublished() > 0,
            "nothing goes out while the server is down"
        );
        own.up().unwrap();
        assert!(
            wait(&|| site.unpublished() == 0),
            "the later events went out over TLS after the restart"
        );
        child.signal(libc::SIGTERM);
        child.wait().code(0);
        let other = Site::new();
        let from = format!("tls://127.0.0.1:{}/EDI_FOLLOW/reader", own.port);
        consume(&other, &from, &["--tls-ca", &ca]).code(0);
        assert_eq!(keys(&other), keys(&site));
        assert_eq!(
            other.count("SELECT count(*) FROM deliveries"),
            site.count("SELECT count(*) FROM interchanges"),
            "each interchange delivered once"
        );
    }

    /// A certificate that names another host, or has expired, is refused, whatever CA signed
    /// it.
    #[test]
    fn a_certificate_for_another_name_or_expired_is_refused() {
        let certs = Certs::make();
        refused_for(&certs, "elsewhere", "does not name the host 127.0.0.1");
        refused_for(&certs, "expired", "the broker's certificate has expired");
    }

    /// A server with the certificate `cert`: publish and consume refused, saying `why`.
    fn refused_for(certs: &Certs, cert: &str, why: &str) {
        let Some(own) = server(
            &certs.path(&format!("store-{cert}")),
            &tls_block(certs, cert, false),
        ) else {
            return;
        };
        let (site, events) = site_with_events();
        let run = publish(
            &site,
            &format!("tls://127.0.0.1:{}/edi", own.port),
            "EDI_TLS",
            &["--tls-ca", &certs.arg("ca.pem")],
        );
        run.code(1);
        assert!(run.err().contains(why), "{why}: {}", run.err());
        assert_eq!(site.unpublished(), events);
        let other = Site::new();
        let run = consume(
            &other,
            &format!("tls://127.0.0.1:{}/EDI_TLS/reader", own.port),
            &["--tls-ca", &certs.arg("ca.pem")],
        );
        run.code(1);
        assert!(run.err().contains(why), "{why}: {}", run.err());
        assert!(keys(&other).is_empty(), "nothing decided");
    }

    /// Mutual TLS: without a client certificate the server refuses (said so), with one both
    /// sides work.
    #[test]
    fn mutual_tls_wants_the_client_certificate() {
        let certs = Certs::make();
        let Some(own) = server(&certs.path("store"), &tls_block(&certs, "server", true)) else {
            return;
        };
        let (site, events) = site_with_events();
        let to = format!("tls://127.0.0.1:{}/edi", own.port);
        let ca = certs.arg("ca.pem");
        let run = publish(&site, &to, "EDI_MTLS", &["--tls-ca", &ca]);
        run.code(1);
        assert!(
            run.err().contains("wants a client certificate"),
            "the missing client certificate is named: {}",
            run.err()
        );
        assert_eq!(site.unpublished(), events);
        let mine = [
            "--tls-ca",
            &ca,
            "--tls-cert",
            &certs.arg("client.pem"),
            "--tls-key",
            &certs.arg("client.key"),
        ];
        publish(&site, &to, "EDI_MTLS", &mine).success();
        assert_eq!(site.unpublished(), 0);
        let from = format!("tls://127.0.0.1:{}/EDI_MTLS/reader", own.port);
        let other = Site::new();
        let run = consume(&other, &from, &["--tls-ca", &ca]);
        run.code(1);
        assert!(
            run.err().contains("wants a client certificate"),
            "{}",
            run.err()
        );
        assert!(keys(&other).is_empty());
        // The same files from the environment, as the systemd unit's env file gives them.
        let run = other
            .cmd()
            .env("EDI_INBOX_TLS_CA", &ca)
            .env("EDI_INBOX_TLS_CERT", certs.path("client.pem"))
            .env("EDI_INBOX_TLS_KEY", certs.path("client.key"))
            .args(["consume", "--from", &from, "--until-idle", "3s", "-q"])
            .run();
        run.code(0);
        assert_eq!(keys(&other), keys(&site));
    }

    /// Base64url without padding, as JWTs are written.
    fn b64url(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for k in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            }
        }
        out
    }

    /// A NATS JWT of `claims` (`iss` and `sub` filled in), signed by `issuer`.
    fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: &str) -> String {
        let header = b64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let claims = format!(
            r#"{{"jti":"{}","iat":1700000000,"iss":"{}","name":"{name}","sub":"{subject}","nats":{nats}}}"#,
            subject.chars().take(20).collect::<String>(),
            issuer.public_key()
        );
        let input = format!("{header}.{}", b64url(claims.as_bytes()));
        let signature = b64url(&issuer.sign(input.as_bytes()).unwrap());
        format!("{input}.{signature}")
    }

    /// A server in operator mode (an operator, an account with JetStream, a user of it, as
    /// `nsc` makes them): `consume` and `publish` with the user's `.creds` file work; without
    /// it, or with another user's, they are refused as credentials.
    #[test]
    fn a_creds_file_authorises_in_operator_mode() {
        let certs = Certs::make();
        let operator = nkeys::KeyPair::new_operator();
        let account = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user();
        let operator_jwt = jwt(
            &operator,
            &operator.public_key(),
            "op",
            r#"{"type":"operator","version":2}"#,
        );
        let account_jwt = jwt(
            &operator,
            &account.public_key(),
            "EDI",
            r#"{"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1,"mem_storage":-1,"disk_storage":-1,"streams":-1,"consumer":-1},"default_permissions":{"pub":{},"sub":{}},"type":"account","version":2}"#,
        );
        // A user's .creds file, its JWT signed by `signer` (the account, or a forger).
        let creds = |user: &nkeys::KeyPair, signer: &nkeys::KeyPair| {
            let user_jwt = jwt(
                signer,
                &user.public_key(),
                "edi-inbox",
                r#"{"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1,"type":"user","version":2}"#,
            );
            format!(
                "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
                user.seed().unwrap()
            )
        };
        let op_file = certs.path("op.jwt");
        std::fs::write(&op_file, &operator_jwt).unwrap();
        let creds_file = certs.path("edi-inbox.creds");
        std::fs::write(&creds_file, creds(&user, &account)).unwrap();
        // A user the account never signed: its own key signs its JWT.
        let stranger = nkeys::KeyPair::new_user();
        let forged = creds(&stranger, &stranger);
        let forged_file = certs.path("forged.creds");
        std::fs::write(&forged_file, forged).unwrap();
        // JetStream in operator mode needs a system account.
        let system = nkeys::KeyPair::new_account();
        let system_jwt = jwt(
            &operator,
            &system.public_key(),
            "SYS",
            r#"{"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1},"type":"account","version":2}"#,
        );
        let config = format!(
            "operator: \"{}\"\nsystem_account: {sys}\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{account_jwt}\"\n  {sys}: \"{system_jwt}\"\n}}\n",
            op_file.display(),
            account.public_key(),
            sys = system.public_key()
        );
        let Some(own) = server(&certs.path("store"), &config) else {
            return;
        };
        let (site, events) = site_with_events();
        let to = format!("nats://127.0.0.1:{}/edi", own.port);
        let forged_arg = forged_file.display().to_string();
        let run = publish(&site, &to, "EDI_CREDS", &["--nats-creds", &forged_arg]);
        run.code(1);
        assert!(
            run.err().contains("refused the credentials"),
            "{}",
            run.err()
        );
        assert_eq!(site.unpublished(), events);
        let creds_arg = creds_file.display().to_string();
        publish(&site, &to, "EDI_CREDS", &["--nats-creds", &creds_arg]).success();
        assert_eq!(site.unpublished(), 0);
        let other = Site::new();
        let from = format!("nats://127.0.0.1:{}/EDI_CREDS/reader", own.port);
        consume(&other, &from, &[]).code(1);
        assert!(keys(&other).is_empty());
        consume(&other, &from, &["--nats-creds", &creds_arg]).code(0);
        assert_eq!(keys(&other), keys(&site));
    }

    /// User and password, and an NKey, in the server's authorization: a wrong password is
    /// refused and never shown; the right one and the NKey seed's file both work. A token on
    /// a server of its own.
    #[test]
    fn user_password_nkey_and_token_authorise_and_a_wrong_one_is_refused() {
        let certs = Certs::make();
        let pair = nkeys::KeyPair::new_user();
        let seed = pair.seed().unwrap();
        let seed_file = certs.path("user.nk");
        std::fs::write(&seed_file, format!("{seed}\n")).unwrap();
        let config = format!(
            "authorization {{\n  users = [\n    {{user: edi, password: \"pw-R1ght\"}}\n    {{nkey: {}}}\n  ]\n}}\n",
            pair.public_key()
        );
        let Some(own) = server(&certs.path("store"), &config) else {
            return;
        };
        let (site, events) = site_with_events();
        let wrong = format!("nats://edi:pw-Wr0ng@127.0.0.1:{}/edi", own.port);
        let run = publish(&site, &wrong, "EDI_AUTH", &[]);
        run.code(1);
        assert!(
            run.err()
                .contains("refused the credentials (authorization violation)"),
            "{}",
            run.err()
        );
        assert!(
            !run.err().contains("pw-Wr0ng") && !run.out().contains("pw-Wr0ng"),
            "the password is never shown: {}",
            run.err()
        );
        assert_eq!(site.unpublished(), events);
        let right = format!("nats://edi:pw-R1ght@127.0.0.1:{}/edi", own.port);
        publish(&site, &right, "EDI_AUTH", &[]).success();
        assert_eq!(site.unpublished(), 0);
        let other = Site::new();
        let from = format!("nats://127.0.0.1:{}/EDI_AUTH/reader", own.port);
        let run = consume(&other, &from, &[]);
        run.code(1);
        assert!(keys(&other).is_empty(), "no credentials, nothing decided");
        let nkey = seed_file.display().to_string();
        consume(&other, &from, &["--nats-nkey", &nkey]).code(0);
        assert_eq!(keys(&other), keys(&site));
        assert!(
            !format!("{:?}", other.stats()).contains(&seed),
            "the seed is never shown"
        );

        let Some(tokened) = server(
            &certs.path("store2"),
            "authorization {\n  token: \"t0ken-Sec\"\n}\n",
        ) else {
            return;
        };
        let (site, _) = site_with_events();
        let to = format!("nats://t0ken-Sec@127.0.0.1:{}/edi", tokened.port);
        publish(&site, &to, "EDI_TOKEN", &[]).success();
        let other = Site::new();
        let from = format!(
            "nats://t0ken-Sec@127.0.0.1:{}/EDI_TOKEN/reader",
            tokened.port
        );
        consume(&other, &from, &[]).code(0);
        assert_eq!(keys(&other), keys(&site));
    }
}

/// `stunnel4` on a port of the test's own in front of the machine's RabbitMQ: TLS at the
/// terminator, plain AMQP behind it, the machine's server untouched.
#[cfg(feature = "amqp")]
mod amqp {
    use super::*;
    use crate::common::brokers::Rabbit;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use crate::common::free_port;

    struct Stunnel {
        child: std::process::Child,
        port: u16,
    }

    impl Drop for Stunnel {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn stunnel(certs: &Certs, verify: bool, cert: &str) -> Option<Stunnel> {
        let port = free_port();
        let mut config = format!(
            "foreground = yes\npid =\n[amqps]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:5672\ncert = {}\nkey = {}\n",
            certs.arg(&format!("{cert}.pem")),
            certs.arg(&format!("{cert}.key"))
        );
        if verify {
            config.push_str(&format!(
                "CAfile = {}\nverifyChain = yes\nrequireCert = yes\n",
                certs.arg("ca.pem")
            ));
        }
        let file = certs.path(&format!("stunnel-{port}.conf"));
        std::fs::write(&file, config).unwrap();
        let child = match Command::new("stunnel4")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                crate::common::require(
                    &format!("stunnel4 cannot run ({e})"),
                    "EDI_INBOX_REQUIRE_RABBITMQ",
                );
                return None;
            }
        };
        let s = Stunnel { child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("stunnel4 did not listen on {port}");
    }

    /// A queue of the test's own behind a terminator (requiring client certificates where
    /// `verify`), and an inbox with events for it.
    struct Case {
        certs: Certs,
        rabbit: Rabbit,
        // Kept for as long as the case: the terminator stops when dropped.
        _tunnel: Stunnel,
        site: Site,
        events: i64,
        to: String,
        from: String,
    }

    fn case(verify: bool) -> Option<Case> {
        case_with(verify, "server")
    }

    /// The same, the terminator showing the certificate `cert`.
    fn case_with(verify: bool, cert: &str) -> Option<Case> {
        let certs = Certs::make();
        let rabbit = Rabbit::create(Some("#"))?;
        let tunnel = stunnel(&certs, verify, cert)?;
        let (site, events) = site_with_events();
        let to = format!("amqps://guest:guest@127.0.0.1:{}/%2f", tunnel.port);
        let from = format!("{to}/{}", rabbit.queue.clone().unwrap());
        Some(Case {
            certs,
            rabbit,
            _tunnel: tunnel,
            site,
            events,
            to,
            from,
        })
    }

    impl Case {
        fn publish(&self, extra: &[&str]) -> crate::common::Run {
            let mut args = vec![
                "publish",
                "--to",
                &self.to,
                "--exchange",
                &self.rabbit.exchange,
                "--payload",
                "interchange",
            ];
            args.extend_from_slice(extra);
            self.site.run(&args)
        }

        /// Refused with `why`: nothing published, and a second inbox consuming decides
        /// nothing (returned, for the run that then consumes).
        fn refused(&self, extra: &[&str], why: &str) -> Site {
            let run = self.publish(extra);
            run.code(1);
            assert!(run.err().contains(why), "{why}: {}", run.err());
            assert!(!run.err().contains("guest:guest"), "{}", run.err());
            assert_eq!(self.site.unpublished(), self.events);
            let other = Site::new();
            let run = consume(&other, &self.from, extra);
            run.code(1);
            assert!(run.err().contains(why), "{why}: {}", run.err());
            assert!(keys(&other).is_empty());
            other
        }

        /// Published and consumed with `extra`: the same interchanges, the queue empty.
        fn taken(&self, other: &Site, extra: &[&str]) {
            self.publish(extra).success();
            assert_eq!(self.site.unpublished(), 0);
            consume(other, &self.from, extra).code(0);
            assert_eq!(keys(other), keys(&self.site));
            assert_eq!(self.rabbit.ready(), 0, "every delivery acknowledged");
        }
    }

    /// amqps:// through the terminator: a wrong CA refused (nothing published or decided), then
    /// publish and consume with the CA file, the same interchanges; a plain amqp:// URL with a
    /// TLS setting is a usage error.
    #[test]
    fn amqps_publishes_and_consumes_and_refuses_a_wrong_ca() {
        let Some(c) = case(false) else {
            return;
        };
        let other = c.refused(
            &["--tls-ca", &c.certs.arg("other-ca.pem")],
            "not signed by a CA trusted here",
        );
        c.taken(&other, &["--tls-ca", &c.certs.arg("ca.pem")]);
        let plain = c.site.run(&[
            "publish",
            "--to",
            crate::common::brokers::AMQP,
            "--tls-ca",
            &c.certs.arg("ca.pem"),
        ]);
        plain.code(2);
        assert!(plain.err().contains("amqps://"), "{}", plain.err());
    }

    /// `kill -9` of consumers over amqps:// at random moments, then a run to the end: each
    /// interchange applied once, the queue empty (what a killed one held came again). Each kill
    /// falls once the consumer has decided something; two of the three must land mid-work
    /// (the signal ending it, deliveries left in the queue).
    #[test]
    fn amqps_consumers_killed_at_random_apply_each_interchange_once() {
        use crate::common::synth::Synth;
        use crate::consume::{Consumer, applied, synthetic};
        let Some(c) = case(false) else {
            return;
        };
        let bodies = synthetic(600, 13);
        let puts: Vec<(Vec<u8>, Option<String>, Option<String>)> = bodies
            .iter()
            .enumerate()
            .map(|(k, b)| (b.clone(), Some(format!("t{k}")), None))
            .collect();
        c.rabbit.put(&puts);
        let ca = c.certs.arg("ca.pem");
        let args = ["--from", &c.from, "--batch", "50", "--tls-ca", &ca];
        let other = Site::new();
        let mut rng = Synth::new(5);
        let mut killed_mid_work = 0;
        for round in 0..3 {
            let out = other.path(&format!("run{round}.jsonl"));
            let child = Consumer::start(&other, &args, &out);
            // Once it has decided a random number of deliveries (up to a tenth), a random few
            // milliseconds on; mid-work where the signal ended it and the queue still held
            // deliveries (after a fixed sleep, all 600 were often decided by the second kill).
            let target = 1 + rng.below(60) as usize;
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while child.lines() < target && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(rng.below(30)));
            let before = child.lines();
            let killed = child.kill();
            let left = c.rabbit.ready();
            eprintln!(
                "round {round}: killed by the signal: {killed}, {before} lines, {left} ready"
            );
            if killed && before > 0 && left > 0 {
                killed_mid_work += 1;
            }
        }
        assert!(
            killed_mid_work >= 2,
            "the kills must fall in the middle of the work: {killed_mid_work} of 3 did"
        );
        consume(&other, &c.from, &["--tls-ca", &ca]).code(0);
        let (keys, rows) = applied(&other);
        assert_eq!((keys.len(), rows), (600, 600));
        assert_eq!(c.rabbit.ready(), 0, "every delivery acknowledged");
    }

    /// A certificate for another name, and one expired, refused; a wrong password refused
    /// by RabbitMQ behind the terminator, the password never shown.
    #[test]
    fn amqps_refuses_another_name_an_expired_certificate_and_a_wrong_password() {
        let Some(c) = case_with(false, "elsewhere") else {
            return;
        };
        c.refused(
            &["--tls-ca", &c.certs.arg("ca.pem")],
            "does not name the host 127.0.0.1",
        );
        let Some(c) = case_with(false, "expired") else {
            return;
        };
        c.refused(
            &["--tls-ca", &c.certs.arg("ca.pem")],
            "the broker's certificate has expired",
        );
        let Some(c) = case(false) else {
            return;
        };
        let wrong = c.to.replace("guest:guest", "guest:pw-Wr0ng");
        let run = c.site.run(&[
            "publish",
            "--to",
            &wrong,
            "--exchange",
            &c.rabbit.exchange,
            "--tls-ca",
            &c.certs.arg("ca.pem"),
        ]);
        run.code(1);
        assert!(!run.err().contains("pw-Wr0ng"), "{}", run.err());
        assert!(
            run.err().to_lowercase().contains("access_refused")
                || run.err().to_lowercase().contains("authentication"),
            "{}",
            run.err()
        );
        assert_eq!(c.site.unpublished(), c.events);
    }

    /// A delivery rejected by a consumer over amqps:// is dead-lettered over amqps:// too.
    #[test]
    fn amqps_dead_letters_go_out_over_tls() {
        let Some(c) = case(false) else {
            return;
        };
        let Some(dead) = Rabbit::create(Some("#")) else {
            return;
        };
        c.rabbit
            .put(&[(b"not EDIFACT at all".to_vec(), Some("poison".into()), None)]);
        let ca = c.certs.arg("ca.pem");
        let to_dead = format!("{}/{}", c.to, dead.exchange);
        let other = Site::new();
        let run = consume(
            &other,
            &c.from,
            &["--tls-ca", &ca, "--dead-letter", &to_dead],
        );
        // 3: a delivery was rejected.
        run.code(3);
        let held = dead.take();
        assert_eq!(held.len(), 1, "dead-lettered once over TLS: {}", run.err());
        assert_eq!(held[0].body, b"not EDIFACT at all");
        assert_eq!(c.rabbit.ready(), 0, "the poison delivery is settled");
    }

    /// Mutual TLS at the terminator: refused without the client certificate, taken with it.
    #[test]
    fn amqps_with_mutual_tls_wants_the_client_certificate() {
        let Some(c) = case(true) else {
            return;
        };
        let ca = c.certs.arg("ca.pem");
        let other = c.refused(&["--tls-ca", &ca], "wants a client certificate");
        let (cert, key) = (c.certs.arg("client.pem"), c.certs.arg("client.key"));
        c.taken(
            &other,
            &["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key],
        );
    }
}

/// Settings that apply to none of the URLs, and files that cannot be used, are usage errors
/// (exit 2) before anything connects; the key file's contents are never shown.
#[cfg(feature = "nats")]
#[test]
fn tls_settings_are_checked_before_connecting() {
    let certs = Certs::make();
    let site = Site::new();
    let nats = "nats://127.0.0.1:1/edi";
    let (ca, cert, key) = (
        certs.arg("ca.pem"),
        certs.arg("client.pem"),
        certs.arg("client.key"),
    );
    let missing = certs.arg("missing.pem");
    let cases: [(&str, Vec<&str>, &str); 4] = [
        (
            "dir:out",
            vec!["--nats-creds", &ca],
            "--nats-creds is for nats://",
        ),
        (
            nats,
            vec!["--tls-cert", &cert],
            "--tls-cert needs --tls-key",
        ),
        (
            nats,
            vec!["--tls-cert", &key, "--tls-key", &key],
            "holds no PEM certificate",
        ),
        (nats, vec!["--tls-ca", &missing], "--tls-ca: cannot read"),
    ];
    let secret = std::fs::read_to_string(certs.path("client.key")).unwrap();
    let secret = secret.lines().nth(1).unwrap();
    for (to, extra, want) in cases {
        let mut args = vec!["publish", "--to", to];
        args.extend(extra);
        let run = site.run(&args);
        run.code(2);
        assert!(run.err().contains(want), "{want}: {}", run.err());
        assert!(
            !run.err().contains(secret),
            "the key is never shown: {}",
            run.err()
        );
    }
}

/// A self-signed X.509 v1 certificate for `edi-inbox` and its key, in `dir` (`cli.pem`,
/// `cli.key`): what `openssl x509 -req` without extensions writes. Made with OpenSSL (the `as4`
/// feature's), as rcgen writes v3 only.
#[cfg(all(feature = "nats", feature = "as4"))]
fn v1_certificate(dir: &std::path::Path) -> (String, String) {
    use openssl::asn1::Asn1Time;
    use openssl::bn::BigNum;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::PKey;
    use openssl::x509::{X509Builder, X509NameBuilder};
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", "edi-inbox").unwrap();
    let name = name.build();
    let mut b = X509Builder::new().unwrap();
    b.set_version(0).unwrap();
    let serial = BigNum::from_u32(1).unwrap().to_asn1_integer().unwrap();
    b.set_serial_number(&serial).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    let cert = b.build();
    assert_eq!(cert.version(), 0, "an X.509 v1 certificate");
    let (pem, key_file) = (dir.join("cli.pem"), dir.join("cli.key"));
    std::fs::write(&pem, cert.to_pem().unwrap()).unwrap();
    std::fs::write(&key_file, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    (pem.display().to_string(), key_file.display().to_string())
}

/// An X.509 v1 client certificate, which rustls does not accept, is said to be one, with what
/// to do (a usage error before anything connects), not "cert and key do not go together"; a
/// v3 certificate with another certificate's key still is.
#[cfg(all(feature = "nats", feature = "as4"))]
#[test]
fn a_v1_client_certificate_is_said_to_be_one() {
    let certs = Certs::make();
    let (cert, key) = v1_certificate(certs.dir.path());
    let site = Site::new();
    let run = site.run(&[
        "publish",
        "--to",
        "nats://127.0.0.1:1/edi",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    run.code(2);
    let err = run.err();
    assert!(
        err.contains(&format!(
            "--tls-cert: {cert} is an X.509 v1 certificate, which rustls (the TLS library here) does not accept: issue a v3 certificate"
        )),
        "{err}"
    );
    assert!(!err.contains("do not go together"), "{err}");
    let secret = std::fs::read_to_string(&key).unwrap();
    assert!(!err.contains(secret.lines().nth(1).unwrap()), "{err}");
    // A v3 certificate whose key is another's: that is what does not go together.
    let (client, other_key) = (certs.arg("client.pem"), certs.arg("server.key"));
    let run = site.run(&[
        "publish",
        "--to",
        "nats://127.0.0.1:1/edi",
        "--tls-cert",
        &client,
        "--tls-key",
        &other_key,
    ]);
    run.code(2);
    assert!(run.err().contains("do not go together"), "{}", run.err());
    assert!(!run.err().contains("X.509 v"), "{}", run.err());
}
