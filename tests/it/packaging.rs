//! What ships beside the binary (`packaging/`): the systemd units' command lines, run as systemd
//! runs them; the alert rules, through promtool; the Grafana dashboard; and that every metric
//! those two name is one the binary writes. The package itself is built and installed in a
//! throwaway root by `packaging/check`, which `.ci/run` runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::common::brokers::Jet;
use crate::common::{RunExt, StartExt};
use crate::common::{free_port, samples};

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging")
}

/// The environment file's `NAME=value` lines (comments and blank lines passed over), with
/// `overrides` replacing the values of the same names.
fn environment(overrides: &[(&str, String)]) -> BTreeMap<String, String> {
    let text = fs::read_to_string(packaging().join("env")).unwrap();
    let mut env = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not NAME=value in packaging/env: {line}"));
        env.insert(name.to_string(), value.to_string());
    }
    for (name, value) in overrides {
        assert!(
            env.contains_key(*name),
            "packaging/env has no {name} to override"
        );
        env.insert(name.to_string(), value.clone());
    }
    env
}

/// A unit's `ExecStart=`, its variables expanded as systemd expands them: `${NAME}` into one
/// word, `$NAME` split at whitespace (no word at all when empty). Every name must be set.
fn exec_start(unit: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let text = fs::read_to_string(packaging().join("systemd").join(unit)).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("{unit} has no ExecStart="));
    let value = |name: &str| {
        env.get(name)
            .unwrap_or_else(|| panic!("{unit} uses {name}, which packaging/env does not set"))
            .clone()
    };
    let mut words = Vec::new();
    for word in line.split_whitespace() {
        if let Some(name) = word.strip_prefix('$').filter(|n| !n.starts_with('{')) {
            words.extend(value(name).split_whitespace().map(str::to_string));
            continue;
        }
        let mut out = String::new();
        let mut rest = word;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').expect("a closing brace") + start;
            out.push_str(&value(&rest[start + 2..end]));
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        words.push(out);
    }
    assert_eq!(
        words.first().map(String::as_str),
        Some("/usr/bin/edi-inbox"),
        "{unit}"
    );
    words
}

/// The unit's command, with this build's binary for /usr/bin/edi-inbox and the environment
/// file's variables in its environment (systemd's `EnvironmentFile=`: EDI_INBOX_DB is read
/// from there).
fn unit_command(unit: &str, env: &BTreeMap<String, String>) -> Command {
    let words = exec_start(unit, env);
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"));
    cmd.args(&words[1..]).env_clear().envs(env);
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd
}

/// The metric families the metrics files in `dir` hold (their `# TYPE` lines).
fn families(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(dir).unwrap() {
        let text = fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                names.insert(rest.split(' ').next().unwrap().to_string());
            }
        }
    }
    names
}

/// Every `edi_inbox_…` metric name in `text`.
fn named_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("edi_inbox_") {
        let before = rest[..at].chars().last();
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not the tail of a longer word (a file name such as edi_inbox_ingest.prom is one, but
        // the rules and dashboard name none).
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            names.insert(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    names
}

/// The label values `text` selects on, as (metric, label, value): `m{l="v"}` gives v, and
/// `m{l=~"a|b"}` gives a and b. The labels Prometheus adds when it scrapes (instance, job) are
/// not the binary's, and passed over.
fn selected_labels(text: &str) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for metric in named_metrics(text) {
        let mut rest = text;
        while let Some(at) = rest.find(&format!("{metric}{{")) {
            let inner = &rest[at + metric.len() + 1..];
            let end = inner.find('}').expect("a closing brace");
            for matcher in inner[..end].split(',') {
                let (label, value) = match matcher.split_once("=~") {
                    Some((l, v)) => (l, v),
                    None => matcher.split_once('=').expect("label=value"),
                };
                let label = label.trim();
                if label == "instance" || label == "job" {
                    continue;
                }
                for v in value.trim().trim_matches('"').split('|') {
                    found.push((metric.clone(), label.to_string(), v.to_string()));
                }
            }
            rest = &inner[end..];
        }
    }
    found
}

/// Each PromQL expression of the dashboard's panels.
fn dashboard_queries() -> Vec<String> {
    let text = fs::read_to_string(packaging().join("grafana/edi-inbox.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        let targets = panel["targets"].as_array().expect("each panel has targets");
        assert!(!targets.is_empty(), "{panel}");
        for t in targets {
            queries.push(t["expr"].as_str().expect("each target an expr").to_string());
        }
    }
    queries
}

/// POSTs `body` with `headers` (`Name: value` lines) to 127.0.0.1:`port` over HTTP/1.1, and
/// gives the status and the body of the answer.
fn http_post(port: u16, headers: &str, body: &[u8]) -> (u16, Vec<u8>) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for line in headers.lines().filter(|l| !l.trim().is_empty()) {
        head.push_str(line.trim_end());
        head.push_str("\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {}", String::from_utf8_lossy(&answer)));
    let status = String::from_utf8_lossy(&answer[..end])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let body = answer[end + 4..].to_vec();
    // hyper answers a known length; a chunked answer would need decoding.
    assert!(!head.contains("transfer-encoding: chunked"), "{head}");
    (status, body)
}

/// Sets a file's modification time an hour back, past any --min-age.
fn age(path: &Path) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

#[test]
fn the_units_command_lines_run_as_systemd_runs_them_and_write_every_metric_the_rules_and_dashboard_name()
 {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("var/lib/edi-inbox");
    let at = |rel: &str| state.join(rel).display().to_string();
    for sub in ["drop", "archive", "quarantine", "metrics", "out"] {
        fs::create_dir_all(state.join(sub)).unwrap();
    }
    let jet = Jet::create();
    let mut overrides = vec![
        ("EDI_INBOX_DB", at("inbox.db")),
        ("EDI_INBOX_DROP", at("drop")),
        ("EDI_INBOX_ARCHIVE", at("archive")),
        ("EDI_INBOX_QUARANTINE", at("quarantine")),
        ("EDI_INBOX_METRICS", at("metrics")),
        ("EDI_INBOX_PUBLISH_TO", format!("dir:{}", at("out"))),
        ("EDI_INBOX_CONSUME_ARGS", "--until-idle 2s".to_string()),
    ];
    if let Some(jet) = &jet {
        overrides.push(("EDI_INBOX_CONSUME_FROM", jet.from("edi-inbox")));
    }
    let env = environment(&overrides);

    // Ingest, with the file's --min-age: every sample, aged past it, then one just written.
    let mut valid = 0;
    let mut broken = 0;
    for kind in ["valid", "broken"] {
        for entry in fs::read_dir(samples().join(kind)).unwrap() {
            let from = entry.unwrap().path();
            let to = state.join("drop").join(format!(
                "{kind}-{}",
                from.file_name().unwrap().to_string_lossy()
            ));
            fs::copy(&from, &to).unwrap();
            age(&to);
            *if kind == "valid" {
                &mut valid
            } else {
                &mut broken
            } += 1;
        }
    }
    fs::write(state.join("drop/young.edi"), b"UNB+UNOA:1").unwrap();
    let out = unit_command("edi-inbox-ingest.service", &env).run();
    out.code(3);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = format!("{} files: ", valid + broken + 1);
    // A rejection's quote stands under its line, indented (the segment, and a `^` under the
    // byte): part of the problem's report.
    let quote = "           ";
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with(quote)).collect();
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("rejected ") || l.starts_with(&summary)),
        "--quiet prints only problems and the summary: {stdout}"
    );
    assert_eq!(lines.len(), broken + 1, "{stdout}");
    // Interchange files only: a quarantined file has its reason beside it, NAME.error.txt.
    let listing = |sub: &str| {
        fs::read_dir(state.join(sub))
            .unwrap()
            .filter(|e| {
                !e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".error.txt")
            })
            .count()
    };
    assert_eq!(
        (listing("drop"), listing("archive"), listing("quarantine")),
        (1, valid, broken),
        "only the young file stays in the drop folder"
    );

    let out = unit_command("edi-inbox-purge.service", &env).run();
    out.code(0);

    // The long-running publisher: its metrics file comes while it runs; SIGTERM ends it with 0.
    let mut publisher = unit_command("edi-inbox-publish.service", &env)
        .stdout(Stdio::null())
        .start();
    let publish_prom = state.join("metrics/edi_inbox_publish.prom");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fs::read_to_string(&publish_prom)
        .is_ok_and(|t| t.contains("\nedi_inbox_outbox_unpublished{kind=\"message\"} 0\n"))
    {
        assert!(
            Instant::now() < deadline,
            "publish --follow wrote no metrics with an empty outbox"
        );
        assert!(
            publisher.child().try_wait().unwrap().is_none(),
            "publish ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(listing("out") > 0, "nothing published");
    publisher.signal(libc::SIGTERM);
    publisher.wait().code(0);

    if let Some(jet) = &jet {
        let body = fs::read(samples().join("valid/two-interchanges.edi")).unwrap();
        jet.put(&[(body, Some("again.edi".to_string()))]);
        let out = unit_command("edi-inbox-consume.service", &env).run();
        out.code(0);
    }

    // The AS4 endpoint (AS2 beside it): a message of the independent sender (the fixture)
    // answered with its receipt, then sent again and answered with the same bytes, and a request that is no AS4
    // message refused; SIGTERM ends it, with 3 for the refusal.
    let port = free_port();
    let as4 = dir.path().join("as4.toml");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/as4");
    let certs = fixtures.join("certs");
    fs::write(
        &as4,
        format!(
            "[own]\nparty_id = \"PTE000002\"\nkey = \"{}\"\ncert = \"{}\"\n\n[[partner]]\nparty_id = \"PTE000001\"\ncert = \"{}\"\n",
            certs.join("receiver.key.pem").display(),
            certs.join("receiver.cert.pem").display(),
            certs.join("sender.cert.pem").display()
        ),
    )
    .unwrap();
    let env = {
        let mut env = env.clone();
        env.insert(
            "EDI_INBOX_RECEIVE_LISTEN".into(),
            format!("127.0.0.1:{port}"),
        );
        env.insert("EDI_INBOX_AS4_CONFIG".into(), as4.display().to_string());
        // AS2 beside it, for the asynchronous MDNs' figures (none is queued here).
        let as2 = dir.path().join("as2.toml");
        fs::write(
            &as2,
            format!(
                "[own]\nas2_id = \"EDIINBOX\"\nkey = \"{}\"\ncert = \"{}\"\n\n[[partner]]\nas2_id = \"PARTNER\"\ncert = \"{}\"\n",
                certs.join("receiver.key.pem").display(),
                certs.join("receiver.cert.pem").display(),
                certs.join("sender.cert.pem").display()
            ),
        )
        .unwrap();
        env.insert("EDI_INBOX_AS2_CONFIG".into(), as2.display().to_string());
        env
    };
    let mut receiver = unit_command("edi-inbox-receive.service", &env)
        .stdout(Stdio::null())
        .start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "receive never listened on {port}"
        );
        assert!(
            receiver.child().try_wait().unwrap().is_none(),
            "receive ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let headers = fs::read_to_string(fixtures.join("request.headers")).unwrap();
    let request = fs::read(fixtures.join("request.bin")).unwrap();
    let (status, receipt) = http_post(port, &headers, &request);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&receipt));
    assert!(
        String::from_utf8_lossy(&receipt).contains("NonRepudiationInformation"),
        "not a receipt: {}",
        String::from_utf8_lossy(&receipt)
    );
    assert_eq!(http_post(port, &headers, &request), (200, receipt));
    let (status, refusal) = http_post(port, "Content-Type: text/plain\n", b"hello");
    assert!(
        String::from_utf8_lossy(&refusal).contains("EBMS:0009"),
        "{status}: {}",
        String::from_utf8_lossy(&refusal)
    );
    receiver.signal(libc::SIGTERM);
    receiver.wait().code(3);

    let metrics = state.join("metrics");
    let written = families(&metrics);
    let stamps = fs::read_dir(&metrics)
        .unwrap()
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    for (command, code) in [("ingest", 3), ("purge", 0), ("publish", 0), ("receive", 3)] {
        let line = format!("edi_inbox_last_run_exit_code{{command=\"{command}\"}} {code}\n");
        assert!(stamps.contains(&line), "{line} in {stamps}");
    }
    // Without the consumer's file, its metrics are not known here (NATS is not running).
    let consume_known = jet.is_some();
    let rules = fs::read_to_string(packaging().join("prometheus/edi-inbox.rules.yml")).unwrap();
    let named: BTreeSet<String> = named_metrics(&rules)
        .into_iter()
        .chain(dashboard_queries().iter().flat_map(|q| named_metrics(q)))
        .collect();
    assert!(named.len() >= 15, "{named:?}");
    // And every label value they select on is one those runs wrote.
    let samples: Vec<String> = stamps.lines().map(str::to_string).collect();
    let queries: Vec<String> = std::iter::once(rules.clone())
        .chain(dashboard_queries())
        .collect();
    for (metric, label, value) in queries.iter().flat_map(|q| selected_labels(q)) {
        if !consume_known && metric.starts_with("edi_inbox_consume_") {
            continue;
        }
        let wanted = format!("{label}=\"{value}\"");
        assert!(
            samples
                .iter()
                .any(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&wanted)),
            "{metric}{{{wanted}}} is selected by the rules or the dashboard, but no command wrote it"
        );
    }
    for name in &named {
        if !consume_known && name.starts_with("edi_inbox_consume_") {
            continue;
        }
        // Written for a Kafka source only (the unit consumes from NATS here): tests/it/kafka.rs
        // checks that consume writes them.
        if name == "edi_inbox_consume_position"
            || name == "edi_inbox_consume_lag"
            || name == "edi_inbox_consume_run_positions_lost"
        {
            continue;
        }
        assert!(
            written.contains(name),
            "{name} is named by the rules or the dashboard, but no command wrote it: {written:?}"
        );
    }
    // node_exporter serves the files together: every family, those they share merged.
    if let Some(body) = crate::operator::node_exporter_serves(&metrics) {
        // Each series of each file, by its name and labels (the value may be reformatted). A
        // series two files both held would be served once and the other copy dropped, with
        // only a log line to say so: no two files may hold the same one.
        let mut seen = BTreeMap::new();
        for entry in fs::read_dir(&metrics).unwrap() {
            let path = entry.unwrap().path();
            for line in fs::read_to_string(&path).unwrap().lines() {
                if line.starts_with('#') {
                    continue;
                }
                let series = line[..line.rfind(' ').unwrap()].to_string();
                assert!(body.contains(&format!("\n{series} ")), "{series}: {body}");
                if let Some(other) = seen.insert(series.clone(), path.clone()) {
                    panic!("{series} is in {} and {}", other.display(), path.display());
                }
            }
        }
        for command in ["ingest", "purge", "publish", "receive"] {
            let series = format!("edi_inbox_last_run_exit_code{{command=\"{command}\"}}");
            assert!(body.contains(&series), "{series}: {body}");
        }
    }
}

/// `promtool check rules` and `promtool test rules`; then, for each alert in turn, its
/// expression replaced by one that never fires: the tests must catch every one of them.
#[test]
fn alert_rules_pass_promtool_and_every_alert_has_a_test_that_fires_it() {
    let Some(promtool) = crate::operator::promtool() else {
        return;
    };
    let rules = fs::read_to_string(packaging().join("prometheus/edi-inbox.rules.yml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let test_files = ["edi-inbox.rules.test.yml", "edi-inbox.rules.daily.test.yml"];
    let mut tests = String::new();
    for file in test_files {
        let text = fs::read_to_string(packaging().join("prometheus").join(file)).unwrap();
        fs::write(dir.path().join(file), &text).unwrap();
        tests.push_str(&text);
    }
    let run = |rules: &str, verb: &str| {
        fs::write(dir.path().join("edi-inbox.rules.yml"), rules).unwrap();
        let files: &[&str] = if verb == "check" {
            &["edi-inbox.rules.yml"]
        } else {
            &test_files
        };
        Command::new(promtool)
            .args([verb, "rules"])
            .args(files)
            .current_dir(dir.path())
            .run()
    };
    run(&rules, "check").success();
    run(&rules, "test").success();

    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n        exp_alerts: []\n")),
            "{alert} has no test where it stays quiet"
        );
        let silenced = silence(&rules, alert);
        assert_ne!(silenced, rules);
        run(&silenced, "check").success();
        let out = run(&silenced, "test");
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(alert),
            "with {alert} never firing, the rule tests still pass: {out:?}"
        );
    }
}

/// The rules with `alert`'s expression (one line, or a `|` block) replaced by one that never
/// fires.
fn silence(rules: &str, alert: &str) -> String {
    let mut out = Vec::new();
    let mut lines = rules.lines().peekable();
    let mut inside = false;
    while let Some(line) = lines.next() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            inside = name == alert;
        }
        match line.trim_start().strip_prefix("expr:") {
            Some(_) if inside => {
                let indent = line.len() - line.trim_start().len();
                out.push(format!("{}expr: vector(1) == 0", " ".repeat(indent)));
                while lines
                    .peek()
                    .is_some_and(|next| next.len() - next.trim_start().len() > indent)
                {
                    lines.next();
                }
            }
            _ => out.push(line.to_string()),
        }
    }
    out.join("\n") + "\n"
}

#[test]
fn the_dashboard_is_grafana_json_whose_panels_each_query_edi_inbox_metrics() {
    let text = fs::read_to_string(packaging().join("grafana/edi-inbox.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dash["uid"], "edi-inbox");
    let variables: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "instance"]);
    let panels = dash["panels"].as_array().unwrap();
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{p}");
        for key in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][key].is_u64(), "{p}");
        }
    }
    let titles: Vec<&str> = panels
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for wanted in [
        "Outcomes of the last ingest run",
        "Drift and rejections",
        "Run duration",
        "Outbox backlog",
    ] {
        assert!(titles.contains(&wanted), "{titles:?}");
    }
    for q in dashboard_queries() {
        assert!(
            !named_metrics(&q).is_empty(),
            "{q} names no edi-inbox metric"
        );
        assert!(
            q.contains("instance=~\"$instance\""),
            "{q} ignores the host picker"
        );
    }
}

#[test]
fn named_metrics_finds_whole_metric_names_only() {
    assert_eq!(
        named_metrics("rate(edi_inbox_a_total{x=\"1\"}[5m]) / edi_inbox_b and my_edi_inbox_c"),
        ["edi_inbox_a_total", "edi_inbox_b"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert_eq!(
        selected_labels(
            "increase(edi_inbox_x_total{status=\"drift\"}[5m]) + edi_inbox_y{instance=~\"$instance\", outcome=~\"failed|parked\"}"
        ),
        [
            ("edi_inbox_x_total", "status", "drift"),
            ("edi_inbox_y", "outcome", "failed"),
            ("edi_inbox_y", "outcome", "parked"),
        ]
        .map(|(m, l, v)| (m.to_string(), l.to_string(), v.to_string()))
    );
    let rules = "      - alert: A\n        expr: |\n          x > 1\n          or y > 2\n        labels:\n      - alert: B\n        expr: z > 3\n";
    assert_eq!(
        silence(rules, "A"),
        "      - alert: A\n        expr: vector(1) == 0\n        labels:\n      - alert: B\n        expr: z > 3\n"
    );
}

/// Every variable the program reads, set to a value holding a secret: no command's `--help`,
/// no manual page and no completion script shows it (a PostgreSQL URL or a broker URL carries a
/// password). Every `[env: NAME]` a help text names must be one of these, so that a variable
/// added later is tested too.
#[test]
fn no_value_from_the_environment_shows_in_help_man_pages_or_completions() {
    let secret = "s3cr3t-pw";
    let vars = [
        ("EDI_INBOX_DB", format!("postgres://u:{secret}@h/db")),
        (
            "EDI_INBOX_PUBLISH_TO",
            format!("amqp://edi:{secret}@h:1/%2f"),
        ),
        (
            "EDI_INBOX_CONSUME_FROM",
            format!("amqp://edi:{secret}@h:1/%2f/q"),
        ),
        (
            "EDI_INBOX_DEAD_LETTER",
            format!("amqp://edi:{secret}@h:1/%2f/x"),
        ),
        ("EDI_INBOX_KAFKA_GROUP", format!("group-{secret}")),
        ("EDI_INBOX_KAFKA_CONFIG", format!("/etc/{secret}.conf")),
        ("AWS_ENDPOINT_URL_SQS", format!("http://{secret}:9324")),
        ("EDI_INBOX_AS4_CONFIG", format!("/etc/{secret}.toml")),
        ("EDI_INBOX_AS2_CONFIG", format!("/etc/{secret}-as2.toml")),
        ("EDI_INBOX_RECEIVE_LISTEN", format!("{secret}:8080")),
        ("EDI_INBOX_TLS_CA", format!("/etc/{secret}-ca.pem")),
        ("EDI_INBOX_TLS_CERT", format!("/etc/{secret}.pem")),
        ("EDI_INBOX_TLS_KEY", format!("/etc/{secret}.key")),
        ("EDI_INBOX_QUARANTINE", format!("/var/{secret}-quarantine")),
        // The environment file's folders and settings (issue 40, item 7): named, and hidden.
        ("EDI_INBOX_ARCHIVE", format!("/var/{secret}-archive")),
        ("EDI_INBOX_DROP", format!("/var/{secret}-drop")),
        ("EDI_INBOX_METRICS", format!("/var/{secret}-metrics")),
        ("EDI_INBOX_MIN_AGE", "45s".to_string()),
        ("EDI_INBOX_PURGE_DAYS", "45".to_string()),
        (
            "EDI_INBOX_MIGRATE_TO",
            format!("postgres://u:{secret}@h/db"),
        ),
        ("EDI_INBOX_NATS_CREDS", format!("/etc/{secret}.creds")),
        ("EDI_INBOX_NATS_NKEY", format!("/etc/{secret}.nk")),
        // A rule, not a secret: taken (an unknown one would be refused), and hidden as well.
        ("EDI_INBOX_ON_POSITION_LOST", "earliest".to_string()),
        // The side effects: a folder and a role, named; a timeout and a rule, taken.
        ("EDI_INBOX_EFFECTS", format!("/etc/{secret}-effects")),
        ("EDI_INBOX_EFFECTS_ROLE", format!("role_{secret}")),
        ("EDI_INBOX_EFFECTS_TIMEOUT", "45s".to_string()),
        ("EDI_INBOX_ON_EFFECT_ERROR", "halt".to_string()),
        // Not named by --help (every librdkafka setting is read as EDI_INBOX_KAFKA_<KEY>), and
        // never shown either.
        ("EDI_INBOX_KAFKA_SASL_PASSWORD", secret.to_string()),
    ];
    let with_secrets = |args: &[&str]| {
        let mut cmd = crate::common::edi_inbox();
        for (var, value) in &vars {
            cmd.env(var, value);
        }
        let out = cmd.args(args).run();
        out.success();
        format!("{}{}", out.out(), out.err())
    };
    let commands = [
        "inspect",
        "ingest",
        "purge",
        "stats",
        "list",
        "show",
        "reapply",
        "effects",
        "migrate",
        "reprocess",
        "publish",
        "consume",
        "receive",
        "completions",
        "man",
    ];
    let top = with_secrets(&["--help"]);
    for command in commands {
        assert!(
            top.contains(command),
            "--help does not list {command}: {top}"
        );
    }
    let mut named = std::collections::BTreeSet::new();
    for args in std::iter::once(vec!["--help"])
        .chain(commands.iter().map(|c| vec![*c, "--help"]))
        .chain(commands.iter().map(|c| vec!["help", *c]))
        .chain(commands.iter().map(|c| vec![*c, "-h"]))
    {
        let text = with_secrets(&args);
        assert!(
            !text.contains(secret),
            "edi-inbox {args:?} shows a secret:\n{text}"
        );
        for part in text.split("[env: ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            named.insert(name);
        }
    }
    let known: std::collections::BTreeSet<String> = vars
        .iter()
        .map(|(v, _)| v.to_string())
        .filter(|v| v != "EDI_INBOX_KAFKA_SASL_PASSWORD")
        .collect();
    assert_eq!(
        named, known,
        "the variables --help names, against those tested"
    );
    for shell in ["bash", "zsh", "fish"] {
        let text = with_secrets(&["completions", shell]);
        assert!(!text.contains(secret), "completions {shell} shows a secret");
    }
    let pages = tempfile::tempdir().unwrap();
    with_secrets(&["man", "--out", pages.path().to_str().unwrap()]);
    let mut read = 0;
    for page in std::fs::read_dir(pages.path()).unwrap() {
        let page = page.unwrap().path();
        let text = std::fs::read_to_string(&page).unwrap();
        assert!(!text.contains(secret), "{} shows a secret", page.display());
        read += 1;
    }
    assert!(read > commands.len(), "{read} manual pages");
}

/// The units give `publish` and `consume` their broker URLs through the environment: read from
/// there, a password shows in no error.
#[test]
fn broker_urls_from_the_environment_keep_their_passwords_out_of_errors() {
    let secret = "s3cr3t-pw";
    for (command, var, url) in [
        (
            "publish",
            "EDI_INBOX_PUBLISH_TO",
            format!("amqp://edi:{secret}@127.0.0.1:1/%2f"),
        ),
        (
            "consume",
            "EDI_INBOX_CONSUME_FROM",
            format!("amqp://edi:{secret}@127.0.0.1:1/%2f/edi"),
        ),
    ] {
        // Nothing listens on port 1: the run fails, naming the broker without the password.
        let site = crate::common::site::Site::new();
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        site.ingest_quietly(&[]).code(0);
        let mut cmd = site.cmd();
        cmd.env(var, &url).arg(command);
        if command == "consume" {
            cmd.args(["--until-idle", "1s"]);
        }
        let out = cmd.run();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.code(1);
        assert!(said.contains("127.0.0.1:1"), "{said}");
        assert!(!said.contains(secret), "{said}");
    }
}
