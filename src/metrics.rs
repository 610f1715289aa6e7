//! Run figures in the Prometheus text exposition format, for node_exporter's textfile collector
//! (the usual way to watch cron jobs). Each file is written to a temporary name in the same folder
//! and renamed into place, so a scraper never reads half a file.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::time::SystemTime;

/// Builds one metrics file.
#[derive(Debug, Default)]
pub struct Metrics {
    text: String,
}

impl Metrics {
    /// Starts a metric family with its HELP and TYPE lines.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        self
    }

    /// One sample, with labels such as `[("status", "new")]`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.text.push_str(name);
        if !labels.is_empty() {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", inner.join(","));
        }
        let _ = writeln!(self.text, " {value}");
        self
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// A gauge of a run's outcomes, one sample per `status` label.
    pub fn outcomes(&mut self, name: &str, help: &str, counts: &[(&str, usize)]) -> &mut Self {
        self.family(name, "gauge", help);
        for (status, n) in counts {
            self.sample(name, &[("status", status)], *n as f64);
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
        let mut m = Metrics::default();
        m.family("x_total", "counter", "Things.")
            .sample("x_total", &[("status", "a\"b")], 3.0);
        m.single("y_seconds", "gauge", "Time.", 1.5);
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
    }
}
