//! Kafka, as `consume`, `publish` and a dead-letter publisher reach it: the URL (bootstrap
//! servers, topics, consumer group), the client's settings (`--kafka-config FILE` of
//! `key=value` lines, then the `EDI_INBOX_KAFKA_*` variables the command read, handed to
//! librdkafka as they are), and their secrets, which no message, `Debug` or error shows.
//! librdkafka's clients are synchronous with threads of their own: no runtime here.

use rdkafka::ClientConfig;

/// How long a side's setup and each wait on a broker's answer may take (metadata, a commit, the
/// delivery reports of a batch): a broker that takes the connection and then says nothing must
/// not hold the run.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a `kafka://` URL names: `kafka://HOST:PORT[,HOST:PORT...]/TOPIC[,TOPIC...]`, with
/// `?group=NAME` and `&partitions=0,1,...` (those partitions assigned by hand instead of the
/// group's assignment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// librdkafka's `bootstrap.servers`.
    pub servers: String,
    pub topics: Vec<String>,
    pub group: Option<String>,
    pub partitions: Option<Vec<i32>>,
}

/// Reads a `kafka://` URL; the error says what is wrong without the URL. Credentials are not
/// taken in it: they are settings (`sasl.username`, `sasl.password`), kept out of the process
/// list.
pub fn target(text: &str, flag: &str, form: &str) -> Result<Target, String> {
    let rest = text
        .strip_prefix("kafka://")
        .ok_or_else(|| format!("{flag} takes {form}"))?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (servers, topics) = rest.split_once('/').unwrap_or((rest, ""));
    if servers.contains('@') {
        return Err(format!(
            "{flag} kafka://: credentials go in --kafka-config or EDI_INBOX_KAFKA_SASL_USERNAME and EDI_INBOX_KAFKA_SASL_PASSWORD, never in the URL"
        ));
    }
    if servers.is_empty() || servers.split(',').any(str::is_empty) {
        return Err(format!("{flag} takes {form}: no broker address"));
    }
    let topics: Vec<String> = topics
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if topics.is_empty() {
        return Err(format!("{flag} takes {form}: no topic"));
    }
    let mut target = Target {
        servers: servers.to_string(),
        topics,
        group: None,
        partitions: None,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("group", g)) if !g.is_empty() => target.group = Some(g.to_string()),
            Some(("partitions", list)) => {
                let parsed: Result<Vec<i32>, _> = list.split(',').map(str::parse).collect();
                match parsed {
                    Ok(p) if !p.is_empty() && p.iter().all(|&n| n >= 0) => {
                        target.partitions = Some(p)
                    }
                    _ => {
                        return Err(format!(
                            "{flag} kafka://: partitions= takes partition numbers, comma-separated"
                        ));
                    }
                }
            }
            _ => {
                return Err(format!(
                    "{flag} kafka://: the URL takes ?group=NAME and &partitions=N,N,... only"
                ));
            }
        }
    }
    Ok(target)
}

/// True for a plain topic name as Kafka takes it: letters, digits, `.`, `_` and `-`, at most
/// 249 of them.
pub fn is_topic_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The client settings given: those of the file, then those of the environment over them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pairs: Vec<(String, String)>,
}

impl std::fmt::Debug for Settings {
    /// The keys, and the values but of secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.pairs.iter().map(|(k, v)| {
                let shown = if is_secret(k) { "***" } else { v.as_str() };
                (k, shown)
            }))
            .finish()
    }
}

impl Settings {
    /// The settings of the run `run`: its `--kafka-config` file's, then its `EDI_INBOX_KAFKA_*`
    /// variables (but `EDI_INBOX_KAFKA_CONFIG`, the file's name), then its TLS files where no
    /// setting names them.
    pub fn of(run: &super::Settings) -> Result<Settings, String> {
        let mut s = match run.kafka_config.clone() {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("--kafka-config: cannot read {}: {e}", path.display()))?;
                Settings::from_lines(&text)
                    .map_err(|e| format!("--kafka-config {}: {e}", path.display()))?
            }
            None => Settings::default(),
        };
        let mut vars: Vec<(String, String)> = run
            .kafka_variables
            .0
            .iter()
            .filter(|(key, _)| key != "CONFIG")
            .map(|(key, v)| (key.to_ascii_lowercase().replace('_', "."), v.clone()))
            .collect();
        vars.sort();
        for (k, v) in vars {
            s.set(k, v);
        }
        s.take_tls(&run.tls)?;
        Ok(s)
    }

    /// `--tls-ca`, `--tls-cert` and `--tls-key` as librdkafka's `ssl.ca.location`,
    /// `ssl.certificate.location` and `ssl.key.location` (where those are not set themselves),
    /// and TLS asked for: `security.protocol=ssl` where none is set; a plaintext one is refused,
    /// never kept in silence.
    fn take_tls(&mut self, tls: &super::tls::Settings) -> Result<(), String> {
        if !tls.wants_tls() {
            return Ok(());
        }
        for (file, key) in [
            (&tls.ca, "ssl.ca.location"),
            (&tls.cert, "ssl.certificate.location"),
            (&tls.key, "ssl.key.location"),
        ] {
            if let Some(file) = file
                && !self.pairs.iter().any(|(k, _)| k == key)
            {
                self.set(key.to_string(), file.display().to_string());
            }
        }
        match self
            .pairs
            .iter()
            .find(|(k, _)| k == "security.protocol")
            .map(|(_, v)| v.to_ascii_lowercase())
        {
            None => self.set("security.protocol".into(), "ssl".into()),
            Some(p) if p == "plaintext" || p == "sasl_plaintext" => {
                return Err(format!(
                    "--tls-ca, --tls-cert and --tls-key ask for TLS, and the Kafka setting security.protocol is {p}: use ssl or sasl_ssl"
                ));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// `key=value` lines; blank lines and lines starting with `#` left out. An error names the
    /// line, never its value.
    pub fn from_lines(text: &str) -> Result<Settings, String> {
        let mut s = Settings::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {}: not key=value", n + 1));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(format!("line {}: no key", n + 1));
            }
            s.set(key.to_string(), value.trim().to_string());
        }
        Ok(s)
    }

    fn set(&mut self, key: String, value: String) {
        match self.pairs.iter_mut().find(|(k, _)| *k == key) {
            Some(pair) => pair.1 = value,
            None => self.pairs.push((key, value)),
        }
    }

    /// The value given for `key`.
    #[cfg(test)]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `text` with every secret's value replaced by `***`: librdkafka's messages may quote a
    /// value it refused.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.pairs {
            if is_secret(k) && !v.is_empty() {
                out = out.replace(v.as_str(), "***");
            }
        }
        out
    }

    /// A client configuration for `servers`, named for `role` in the broker's logs, with
    /// `defaults` where the settings do not say otherwise, checked by librdkafka itself (an
    /// unknown or wrong setting is refused here, before anything connects).
    pub fn client(
        &self,
        servers: &str,
        role: &str,
        defaults: &[(&str, &str)],
    ) -> Result<ClientConfig, String> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", servers)
            .set("client.id", super::connection_name(role))
            // A broker closing an idle connection is no news.
            .set("log.connection.close", "false");
        for (k, v) in defaults {
            c.set(*k, *v);
        }
        for (k, v) in &self.pairs {
            c.set(k, v);
        }
        c.create_native_config().map_err(|e| self.refusal(&e))?;
        Ok(c)
    }

    /// Why librdkafka refused a setting, without its value where the key is a secret's or one
    /// librdkafka does not know: a misspelt secret (`sasl.passwrd`) is no less secret, and
    /// `is_secret` cannot tell it by its name.
    fn refusal(&self, e: &rdkafka::error::KafkaError) -> String {
        use rdkafka::types::RDKafkaConfRes;
        let text = match e {
            rdkafka::error::KafkaError::ClientConfig(res, desc, key, value) => {
                let hidden = is_secret(key) || *res == RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN;
                let desc = if hidden && !value.is_empty() {
                    desc.replace(value.as_str(), "***")
                } else {
                    desc.clone()
                };
                format!("{desc} (setting {key})")
            }
            other => other.to_string(),
        };
        format!("a Kafka setting was refused: {}", self.scrub(&text))
    }
}

/// What librdkafka logs, on standard error: its warnings and errors, and its debug lines,
/// which it writes only where the `debug` setting asks for them.
pub fn log(level: rdkafka::config::RDKafkaLogLevel, facility: &str, text: &str) {
    use rdkafka::config::RDKafkaLogLevel as L;
    if matches!(level, L::Notice | L::Info) {
        return;
    }
    crate::output::warn(&format!("librdkafka {facility}: {text}"));
}

/// True for a setting whose value is a secret: passwords, keys, OAuth secrets and tokens.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key.contains("token")
        || key == "sasl.oauthbearer.config"
        || key == "sasl.jaas.config"
        || key == "ssl.key.pem"
        || key == "ssl_key"
}

/// The servers and topics, for messages (a URL holds no secret).
pub fn shown(target: &Target) -> String {
    let mut s = format!("kafka://{}/{}", target.servers, target.topics.join(","));
    if let Some(g) = &target.group {
        s.push_str(&format!(" (group {g})"));
    }
    s
}

/// `text` as a header or key is shown: its UTF-8, else escaped byte by byte.
pub fn text_of(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => bytes
            .iter()
            .map(|&b| match b {
                0x20..=0x7E if b != b'\\' => (b as char).to_string(),
                _ => format!("\\x{b:02X}"),
            })
            .collect(),
    }
}

/// The low and high watermarks of a partition as the last fetch response gave them (librdkafka
/// keeps them; no request is made), `None` where no fetch has answered with them yet. Right on
/// brokers whose ListOffsets answer is not (the test broker's).
pub fn cached_watermarks<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    partition: i32,
) -> Option<(i64, i64)> {
    let name = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client is live, the name outlives the call, which only reads the
    // partition's cached offsets into the two integers.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            name.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        && low >= 0
        && high >= 0)
        .then_some((low, high))
}

/// What the brokers say of a topic now ([`topic_ids`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicNow {
    /// It exists, under this topic id (KIP-516, as Kafka shows it: URL-safe base64 of its
    /// 16 bytes). A topic deleted and created again under the same name has another.
    Id(String),
    /// It exists, and the brokers give no id (Kafka before 2.8).
    NoId,
    /// The brokers do not know it (deleted, or never made).
    Missing,
}

/// Each of `topics` as the brokers describe it now (librdkafka's DescribeTopics, a Metadata
/// request, on the client's own connections), waiting `timeout` at most. The rdkafka crate does
/// not offer the topic id, hence the C API: every object made here is destroyed here.
pub fn topic_ids<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topics: &[&str],
    timeout: std::time::Duration,
) -> Result<Vec<TopicNow>, String> {
    use rdkafka::bindings as rd;
    use std::ffi::{CStr, CString, c_char};

    /// Destroys what it holds, on every way out.
    struct Made {
        collection: *mut rd::rd_kafka_TopicCollection_t,
        options: *mut rd::rd_kafka_AdminOptions_t,
        queue: *mut rd::rd_kafka_queue_t,
        event: *mut rd::rd_kafka_event_t,
    }
    impl Drop for Made {
        fn drop(&mut self) {
            // SAFETY: each pointer is null or was made by librdkafka for this call alone.
            unsafe {
                if !self.event.is_null() {
                    rd::rd_kafka_event_destroy(self.event);
                }
                if !self.queue.is_null() {
                    rd::rd_kafka_queue_destroy(self.queue);
                }
                if !self.options.is_null() {
                    rd::rd_kafka_AdminOptions_destroy(self.options);
                }
                if !self.collection.is_null() {
                    rd::rd_kafka_TopicCollection_destroy(self.collection);
                }
            }
        }
    }

    let names: Vec<CString> = topics
        .iter()
        .map(|t| CString::new(*t).map_err(|_| format!("{t:?} is not a topic name")))
        .collect::<Result<_, _>>()?;
    let mut pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let rk = client.native_ptr();
    // SAFETY: `rk` is the live client `client` holds; `names` outlive the call that copies
    // them; every object made is destroyed by `made` (the event's contents are read before).
    unsafe {
        let mut made = Made {
            collection: rd::rd_kafka_TopicCollection_of_topic_names(
                pointers.as_mut_ptr(),
                pointers.len(),
            ),
            options: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
            ),
            queue: rd::rd_kafka_queue_new(rk),
            event: std::ptr::null_mut(),
        };
        if made.collection.is_null() || made.options.is_null() || made.queue.is_null() {
            return Err("librdkafka could not make a DescribeTopics request".into());
        }
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            made.options,
            ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        rd::rd_kafka_DescribeTopics(rk, made.collection, made.options, made.queue);
        // The request's own timeout answers first; the margin only bounds a lost answer.
        made.event = rd::rd_kafka_queue_poll(made.queue, ms.saturating_add(1_000));
        if made.event.is_null() {
            return Err(format!(
                "the brokers did not describe the topics within {} s",
                timeout.as_secs()
            ));
        }
        let err = rd::rd_kafka_event_error(made.event);
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let text = rd::rd_kafka_event_error_string(made.event);
            return Err(if text.is_null() {
                format!("{err:?}")
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            });
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(made.event);
        if result.is_null() {
            return Err("librdkafka answered DescribeTopics with another event".into());
        }
        let mut n = 0usize;
        let described = rd::rd_kafka_DescribeTopics_result_topics(result, &mut n);
        let mut found: Vec<(String, TopicNow)> = Vec::with_capacity(n);
        for i in 0..n {
            let d = *described.add(i);
            let name = CStr::from_ptr(rd::rd_kafka_TopicDescription_name(d))
                .to_string_lossy()
                .into_owned();
            let error = rd::rd_kafka_TopicDescription_error(d);
            let now = if !error.is_null()
                && rd::rd_kafka_error_code(error)
                    != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                match rd::rd_kafka_error_code(error) {
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                    | rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_ID => {
                        TopicNow::Missing
                    }
                    other => {
                        let text = rd::rd_kafka_error_string(error);
                        let text = if text.is_null() {
                            format!("{other:?}")
                        } else {
                            CStr::from_ptr(text).to_string_lossy().into_owned()
                        };
                        return Err(format!("cannot describe the topic {name}: {text}"));
                    }
                }
            } else {
                let id = rd::rd_kafka_TopicDescription_topic_id(d);
                let shown = if id.is_null() {
                    None
                } else {
                    let text = rd::rd_kafka_Uuid_base64str(id);
                    (!text.is_null()).then(|| CStr::from_ptr(text).to_string_lossy().into_owned())
                };
                match shown {
                    // The zero id: the brokers keep none.
                    Some(id) if id.bytes().any(|b| b != b'A') => TopicNow::Id(id),
                    _ => TopicNow::NoId,
                }
            };
            found.push((name, now));
        }
        Ok(topics
            .iter()
            .map(|t| {
                found
                    .iter()
                    .find(|(name, _)| name == t)
                    .map_or(TopicNow::Missing, |(_, now)| now.clone())
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_are_the_runs_not_the_processs() {
        let variables = super::super::settings::KafkaVariables::of(
            [
                ("EDI_INBOX_KAFKA_SASL_PASSWORD", "s3cret"),
                ("EDI_INBOX_KAFKA_CONFIG", "/nowhere"),
                ("EDI_INBOX_KAFKA_CLIENT_RACK", "a"),
                ("OTHER_CLIENT_RACK", "b"),
            ]
            .map(|(k, v)| (k.into(), v.into())),
        );
        let run = super::super::Settings {
            kafka_variables: variables,
            ..Default::default()
        };
        let s = Settings::of(&run).unwrap();
        assert_eq!(s.get("sasl.password"), Some("s3cret"));
        assert_eq!(s.get("client.rack"), Some("a"));
        assert_eq!(s.get("config"), None);
        assert!(!format!("{run:?}").contains("s3cret"), "{run:?}");
        // Nothing of the process's own environment: the run's settings are all there is.
        assert_eq!(
            Settings::of(&super::super::Settings::default()).unwrap(),
            Settings::default()
        );
    }

    #[test]
    fn the_tls_files_become_librdkafkas_ssl_settings_and_never_plaintext() {
        let tls = super::super::tls::Settings {
            ca: Some("/etc/edi-inbox/ca.pem".into()),
            cert: Some("/etc/edi-inbox/client.pem".into()),
            key: Some("/etc/edi-inbox/client.key".into()),
            ..Default::default()
        };
        let mut s = Settings::from_lines("ssl.key.location=/own.key\n").unwrap();
        s.take_tls(&tls).unwrap();
        assert_eq!(s.get("ssl.ca.location"), Some("/etc/edi-inbox/ca.pem"));
        assert_eq!(
            s.get("ssl.certificate.location"),
            Some("/etc/edi-inbox/client.pem")
        );
        assert_eq!(s.get("ssl.key.location"), Some("/own.key"), "its own wins");
        assert_eq!(s.get("security.protocol"), Some("ssl"));
        let mut sasl = Settings::from_lines("security.protocol=SASL_SSL\n").unwrap();
        sasl.take_tls(&tls).unwrap();
        assert_eq!(sasl.get("security.protocol"), Some("SASL_SSL"));
        let mut plain = Settings::from_lines("security.protocol=plaintext\n").unwrap();
        assert!(plain.take_tls(&tls).unwrap_err().contains("plaintext"));
        let mut none = Settings::default();
        none.take_tls(&Default::default()).unwrap();
        assert_eq!(none.get("security.protocol"), None);
    }

    const FORM: &str = "kafka://HOST:PORT/TOPIC";

    #[test]
    fn a_url_names_servers_topics_a_group_and_partitions() {
        assert_eq!(
            target(
                "kafka://a:9092,b:9092/edi.in,edi.more?group=hub",
                "--from",
                FORM
            ),
            Ok(Target {
                servers: "a:9092,b:9092".into(),
                topics: vec!["edi.in".into(), "edi.more".into()],
                group: Some("hub".into()),
                partitions: None,
            })
        );
        let t = target("kafka://a:9092/t?group=g&partitions=0,2", "--from", FORM).unwrap();
        assert_eq!(t.partitions, Some(vec![0, 2]));
        for bad in [
            "kafka://a:9092",
            "kafka://a:9092/",
            "kafka:///t",
            "kafka://a:9092,/t",
            "kafka://a:9092/t?group=",
            "kafka://a:9092/t?partitions=x",
            "kafka://a:9092/t?partitions=-1",
            "kafka://a:9092/t?colour=red",
        ] {
            assert!(target(bad, "--from", FORM).is_err(), "{bad}");
        }
        let e = target("kafka://u:s3cret@a:9092/t", "--from", FORM).unwrap_err();
        assert!(!e.contains("s3cret") && e.contains("--kafka-config"), "{e}");
        assert!(is_topic_name("edi.in-1_x") && !is_topic_name("a b") && !is_topic_name(".."));
    }

    #[test]
    fn settings_are_lines_and_secrets_are_never_shown() {
        let s = Settings::from_lines(
            "# SASL\nsecurity.protocol = SASL_SSL\nsasl.username=edi\nsasl.password=s3cret\n\n",
        )
        .unwrap();
        assert_eq!(s.get("security.protocol"), Some("SASL_SSL"));
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("s3cret") && debug.contains("edi"),
            "{debug}"
        );
        assert_eq!(s.scrub("bad value s3cret"), "bad value ***");
        let e = Settings::from_lines("a=1\nsasl.password s3cret").unwrap_err();
        assert_eq!(e, "line 2: not key=value");
        // librdkafka checks each setting; a refusal never quotes a secret.
        let refused = Settings::from_lines("sasl.password=s3cret\nno.such.setting=1")
            .unwrap()
            .client("h:9092", "test", &[])
            .unwrap_err();
        assert!(
            refused.contains("no.such.setting") && !refused.contains("s3cret"),
            "{refused}"
        );
        // A misspelt secret is unknown to librdkafka, and its value is never shown either.
        for lines in ["sasl.passwrd=SASLSECRET8", "bogus.key=FILESECRET12"] {
            let refused = Settings::from_lines(lines)
                .unwrap()
                .client("h:9092", "test", &[])
                .unwrap_err();
            let (key, value) = lines.split_once('=').unwrap();
            assert!(
                refused.contains(key) && !refused.contains(value),
                "{refused}"
            );
        }
        assert!(is_secret("ssl.key.password") && is_secret("sasl.oauthbearer.client.secret"));
        assert!(!is_secret("sasl.username"));
    }
}
