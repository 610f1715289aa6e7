//! `--to dir:PATH`: one file per event, named by its id, for the downstream systems that pick
//! up files. Written under a temporary name, fsynced, then linked into place, which never
//! replaces a file: an event published again after a crash finds its file there and is
//! skipped.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Answer, Outgoing, Sink};

pub struct DirSink {
    dir: PathBuf,
}

impl DirSink {
    pub fn open(dir: &Path) -> anyhow::Result<DirSink> {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(DirSink {
            dir: dir.to_path_buf(),
        })
    }

    fn write(&self, o: &Outgoing) -> anyhow::Result<Answer> {
        let name = self.dir.join(format!("{}.edi", o.id));
        if name.exists() {
            return Ok(Answer::Duplicate);
        }
        // A dot name: the pick-up side ignores it, and a stale one from a crash is rewritten.
        let tmp = self
            .dir
            .join(format!(".{}.edi.{}.tmp", o.id, std::process::id()));
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&o.body)?;
            f.sync_all()?;
            match fs::hard_link(&tmp, &name) {
                Ok(()) => Ok(Answer::Stored),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Answer::Duplicate),
                Err(e) => Err(e),
            }
        })();
        let _ = fs::remove_file(&tmp);
        result.with_context(|| format!("cannot write {}", name.display()))
    }
}

impl Sink for DirSink {
    /// A failure to write (a full disk, no permission) is the folder's, not the event's: it
    /// ends the batch as a lost connection does, and nothing after it is marked.
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<anyhow::Error>) {
        let mut answers = Vec::with_capacity(batch.len());
        let mut failed = None;
        for o in &batch {
            match self.write(o) {
                Ok(a) => answers.push(a),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        // The names are durable before the events are marked published, those written before
        // a failure too.
        if let Err(e) = fs::File::open(&self.dir).and_then(|d| d.sync_all()) {
            return (
                Vec::new(),
                Some(anyhow::Error::new(e).context(format!("cannot sync {}", self.dir.display()))),
            );
        }
        (answers, failed)
    }
}
