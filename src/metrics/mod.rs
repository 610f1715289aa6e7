//! Run figures in the Prometheus text exposition format, for node_exporter's textfile collector
//! (the usual way to watch cron jobs). Each file is written to a temporary name in the same folder
//! and renamed into place, so a scraper never reads half a file.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::time::SystemTime;

pub mod catalogue;

pub use catalogue::Family;

/// Builds one metrics file.
#[derive(Debug, Default)]
pub struct Metrics {
    text: String,
}

impl Metrics {
    /// Starts a metric family with its HELP and TYPE lines.
    pub fn family(&mut self, f: &Family) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(self.text, "# TYPE {} {}", f.name, f.kind.as_str());
        self
    }

    /// One sample, with the values of the family's labels in their order (`["new"]` for a
    /// family labelled `status`).
    pub fn sample(&mut self, f: &Family, values: &[&str], value: f64) -> &mut Self {
        debug_assert_eq!(
            values.len(),
            f.labels.len(),
            "{}: a value for each of its labels {:?}",
            f.name,
            f.labels
        );
        self.text.push_str(f.name);
        if !values.is_empty() {
            let inner: Vec<String> = f
                .labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", inner.join(","));
        }
        let _ = writeln!(self.text, " {value}");
        self
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, f: &Family, value: f64) -> &mut Self {
        self.family(f).sample(f, &[], value)
    }

    /// A gauge of a run's outcomes, one sample per value of its one label (`status`).
    pub fn outcomes(&mut self, f: &Family, counts: &[(&str, usize)]) -> &mut Self {
        self.family(f);
        for (status, n) in counts {
            self.sample(f, &[status], *n as f64);
        }
        self
    }

    #[cfg(test)]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Writes the file atomically: temporary file in the same folder, fsync, rename.
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "metrics".into());
        // The textfile collector reads only *.prom, so the temporary name is never scraped.
        fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let mut f = fs::File::create(&tmp)?;
        // Readable by the scraper, which runs as another user (whatever the umask keeps from
        // the database): figures are not secrets.
        {
            use std::os::unix::fs::PermissionsExt as _;
            f.set_permissions(fs::Permissions::from_mode(0o644))?;
        }
        f.write_all(self.text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Records in the metrics file at `path` how a run of `command` ended, as its last step: the
/// families it owns ([`catalogue::LAST_RUN_EXIT_CODE`], [`catalogue::LAST_RUN_TIMESTAMP_SECONDS`])
/// are one for every command (told apart by a `command` label), so that one alert rule covers
/// them all; node_exporter merges a family found in several files when its HELP and TYPE agree.
/// The
/// file the command wrote keeps its figures and gains these two families. A run that ended in a
/// fatal error wrote no figures; the previous run's are kept (among them its last success,
/// which is what the alert on "no successful run for a while" must go on seeing).
pub fn stamp_run(path: &Path, command: &str, exit_code: u8) -> std::io::Result<()> {
    use catalogue::{LAST_RUN_EXIT_CODE as EXIT_CODE, LAST_RUN_TIMESTAMP_SECONDS as RUN_TIMESTAMP};
    let mut m = Metrics::default();
    m.family(&EXIT_CODE)
        .sample(&EXIT_CODE, &[command], f64::from(exit_code))
        .family(&RUN_TIMESTAMP)
        .sample(&RUN_TIMESTAMP, &[command], unix_now());
    replace_families(path, &[&EXIT_CODE, &RUN_TIMESTAMP], &m)
}

/// Rewrites the metrics file at `path` with the families `replaced` taken out and `m` added:
/// the rest of what the file held (the previous run's figures) is kept. For a run that writes
/// no figures of its own but must say something (its exit status, a path that did not exist).
pub fn replace_families(path: &Path, replaced: &[&Family], m: &Metrics) -> std::io::Result<()> {
    let before = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut out = Metrics::default();
    for line in before.lines() {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line);
        let name = name.split(['{', ' ']).next().unwrap_or_default();
        if !line.is_empty() && !replaced.iter().any(|f| f.name == name) {
            out.text.push_str(line);
            out.text.push('\n');
        }
    }
    out.text.push_str(&m.text);
    out.write_to(path)
}

/// The value of an unlabelled sample `name` in the metrics file at `path`, if it holds one.
pub fn previous_value(path: &Path, name: &str) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (n, v) = line.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_and_atomic_write() {
        const X: Family = Family {
            name: "x_total",
            kind: catalogue::Kind::Counter,
            help: "Things.",
            labels: &["status"],
        };
        const Y: Family = Family {
            name: "y_seconds",
            kind: catalogue::Kind::Gauge,
            help: "Time.",
            labels: &[],
        };
        let mut m = Metrics::default();
        m.family(&X).sample(&X, &["a\"b"], 3.0);
        m.single(&Y, 1.5);
        assert_eq!(
            m.text(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{status=\"a\\\"b\"} 3\n\
             # HELP y_seconds Time.\n# TYPE y_seconds gauge\ny_seconds 1.5\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edi.prom");
        m.write_to(&path).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), m.text());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "{mode:o}");
    }

    #[test]
    fn a_stamp_keeps_the_figures_and_replaces_the_last_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.prom");
        // A fatal first run: no figures, only the stamp.
        stamp_run(&path, "ingest", 1).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("\nedi_inbox_last_run_exit_code{command=\"ingest\"} 1\n"));
        assert_eq!(text.matches("# TYPE").count(), 2, "{text}");
        let mut m = Metrics::default();
        m.single(
            &Family {
                name: "x_last_success_timestamp_seconds",
                kind: catalogue::Kind::Gauge,
                help: "When.",
                labels: &[],
            },
            7.0,
        );
        m.write_to(&path).unwrap();
        stamp_run(&path, "ingest", 0).unwrap();
        // Then a fatal run again: the success before it stays, the stamp is replaced.
        stamp_run(&path, "ingest", 1).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(m.text()), "{text}");
        let stamps = [
            catalogue::LAST_RUN_EXIT_CODE.name,
            catalogue::LAST_RUN_TIMESTAMP_SECONDS.name,
        ];
        for name in stamps {
            assert_eq!(text.matches(name).count(), 3, "{text}");
        }
        assert!(text.contains("\nedi_inbox_last_run_exit_code{command=\"ingest\"} 1\n"));
        assert!(!text.contains("} 0\n"), "{text}");
        assert_eq!(
            previous_value(&path, "x_last_success_timestamp_seconds"),
            Some(7.0)
        );
        assert_eq!(previous_value(&path, "x_last"), None);
        assert_eq!(previous_value(&dir.path().join("none.prom"), "x"), None);
    }
}
