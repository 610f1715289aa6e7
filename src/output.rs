//! Buffered standard output that ends the run quietly when the reader goes away (`| head`).

use std::io::{self, BufWriter, Stdout, Write};

/// Standard output, buffered and locked for the run.
pub struct Out {
    inner: BufWriter<Stdout>,
}

impl Default for Out {
    fn default() -> Self {
        Out {
            inner: BufWriter::new(io::stdout()),
        }
    }
}

impl Out {
    /// Writes one line. A closed pipe ends the process with status 0, as for `grep | head`.
    pub fn line(&mut self, text: &str) -> anyhow::Result<()> {
        let r = writeln!(self.inner, "{text}");
        self.check(r)
    }

    /// Writes one JSON object on a line of its own.
    pub fn json<T: serde::Serialize>(&mut self, value: &T) -> anyhow::Result<()> {
        let text = serde_json::to_string(value)?;
        self.line(&text)
    }

    /// Flushes, so that a message on standard error comes after what was printed before it.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        let r = self.inner.flush();
        self.check(r)
    }

    fn check(&mut self, r: io::Result<()>) -> anyhow::Result<()> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
            other => Ok(other?),
        }
    }
}

/// Prints a problem on standard error, after flushing what came before it on standard output.
pub fn problem(out: &mut Out, text: &str) -> anyhow::Result<()> {
    out.flush()?;
    eprintln!("edi-inbox: {text}");
    Ok(())
}
