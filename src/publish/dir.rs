//! `--to dir:PATH`: one file per event, named by its id, for the downstream systems that pick
//! up files. Written under a temporary name, fsynced, then linked into place, which never
//! replaces a file: an event published again after a crash finds its file there and is
//! skipped.
//!
//! The folder is shared with whoever picks the files up, so everything in it may be planted:
//! every name is resolved against one handle of the folder opened once, a temporary file is
//! created exclusively and never through a symbolic link, under a name nobody can predict, and
//! a name already taken counts as published only where it holds a regular file with the
//! event's bytes.

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{Answer, Destination, Outgoing, Sink, SinkError, Stop};

/// What begins the name of every temporary file a publisher writes (hidden: the pick-up side
/// and `ingest` pass over dot names and `.tmp`).
const TMP_PREFIX: &str = ".edi-inbox.";

/// A temporary file older than this is stale even where its process id is in use again.
const STALE_AFTER_SECS: i64 = 24 * 3600;

/// `--to dir:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirDestination(PathBuf);

/// Reads `--to dir:PATH` (the broker table's line for a folder).
pub fn parse(text: &str, _: &crate::broker::Settings) -> Result<Box<dyn Destination>, String> {
    match text.strip_prefix("dir:") {
        Some(path) if !path.is_empty() => Ok(Box::new(DirDestination(PathBuf::from(path)))),
        _ => Err("--to dir: takes dir:PATH".into()),
    }
}

impl Destination for DirDestination {
    fn shown(&self) -> String {
        format!("dir:{}", self.0.display())
    }

    fn connect(&self, _: &Stop) -> anyhow::Result<Box<dyn Sink>> {
        Ok(Box::new(DirSink::open(&self.0)?))
    }
}

pub struct DirSink {
    dir: PathBuf,
    /// The folder, opened once: a folder renamed or replaced by a link afterwards changes
    /// nothing about where the files go.
    handle: OwnedFd,
    /// This host's name as it stands in temporary names: a folder shared by several hosts
    /// (NFS) holds other hosts' temporaries, which only they can tell stale.
    host: String,
}

impl DirSink {
    pub fn open(dir: &Path) -> anyhow::Result<DirSink> {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let handle = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("cannot open {}", dir.display()))?;
        let st = rustix::fs::fstat(&handle)
            .with_context(|| format!("cannot read the mode of {}", dir.display()))?;
        let mode = Mode::from_raw_mode(st.st_mode);
        // Anyone may rename or remove a file in a folder others may write to, unless its
        // sticky bit keeps each file to its owner: a published file could be swapped for
        // other content before it is picked up. Group write (the pick-up side's group) is
        // the intended way to share the folder.
        if mode.contains(Mode::WOTH) && !mode.contains(Mode::SVTX) {
            anyhow::bail!(
                "{} may be written by any user and has no sticky bit, so anyone could replace a \
                 published file: refused (chmod o-w, or chmod +t, {})",
                dir.display(),
                dir.display()
            );
        }
        let host = token(&rustix::system::uname().nodename().to_string_lossy());
        let sink = DirSink {
            dir: dir.to_path_buf(),
            handle,
            host,
        };
        sink.remove_stale_temporaries();
        Ok(sink)
    }

    /// A name for a new temporary file: this host, this process, and 64 random bits.
    fn temporary_name(&self) -> anyhow::Result<String> {
        let mut random = [0u8; 8];
        let mut filled = 0;
        while filled < random.len() {
            match rustix::rand::getrandom(
                &mut random[filled..],
                rustix::rand::GetRandomFlags::empty(),
            ) {
                Ok(n) => filled += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(anyhow::Error::new(e).context("cannot read random bytes")),
            }
        }
        Ok(format!(
            "{TMP_PREFIX}{}.{}.{}.tmp",
            self.host,
            std::process::id(),
            hex::encode(random)
        ))
    }

    /// Removes the temporary files this host's publishers left behind when they were killed
    /// mid-write: those whose process is gone (or that are older than a day), regular files
    /// of this user only. Best effort: a file that cannot be removed stays for the next run.
    fn remove_stale_temporaries(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_secs()).ok());
        let me = rustix::process::geteuid();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((host, pid)) = parse_temporary(name) else {
                continue;
            };
            if host != self.host || pid == std::process::id() {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&self.handle, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
            if !regular || st.st_uid != me.as_raw() {
                continue;
            }
            let gone = rustix::process::Pid::from_raw(pid as i32)
                .is_none_or(|p| rustix::process::test_kill_process(p) == Err(Errno::SRCH));
            let old = now.is_some_and(|now| now - st.st_mtime > STALE_AFTER_SECS);
            if gone || old {
                let _ = rustix::fs::unlinkat(&self.handle, name, AtFlags::empty());
            }
        }
    }

    fn write(&self, o: &Outgoing) -> anyhow::Result<Answer> {
        let name = format!("{}.edi", o.id);
        let shown = self.dir.join(&name);
        if let Some(answer) = self.already_there(&name, &o.body)? {
            return Ok(answer);
        }
        let tmp = self.temporary_name()?;
        let result = (|| -> anyhow::Result<Answer> {
            // O_EXCL with O_CREAT never follows a symbolic link at the name, nor opens a file
            // someone put there; O_NOFOLLOW says the same for systems that would.
            let fd = rustix::fs::openat(
                &self.handle,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )?;
            let mut f = fs::File::from(fd);
            f.write_all(&o.body)?;
            f.sync_all()?;
            drop(f);
            match rustix::fs::linkat(
                &self.handle,
                tmp.as_str(),
                &self.handle,
                name.as_str(),
                AtFlags::empty(),
            ) {
                Ok(()) => Ok(Answer::Stored),
                // Taken between the look and the link: what is there decides.
                Err(Errno::EXIST) => Ok(self
                    .already_there(&name, &o.body)?
                    .unwrap_or(Answer::Duplicate)),
                Err(e) => Err(e.into()),
            }
        })();
        let _ = rustix::fs::unlinkat(&self.handle, tmp.as_str(), AtFlags::empty());
        result.with_context(|| format!("cannot write {}", shown.display()))
    }

    /// What a file already at `name` means: `None` where there is none; a duplicate where it
    /// is a regular file with these bytes (a republish after a crash); otherwise a refusal of
    /// this event, since what stands there is not what we published (a link, a folder, or
    /// other bytes), and it is never written through nor replaced.
    fn already_there(&self, name: &str, body: &[u8]) -> anyhow::Result<Option<Answer>> {
        let st = match rustix::fs::statat(&self.handle, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return Ok(Some(Answer::Refused(format!(
                "{name} exists in {} and is not a regular file ({}): not published",
                self.dir.display(),
                describe(kind)
            ))));
        }
        let same = u64::try_from(st.st_size).is_ok_and(|n| n == body.len() as u64) && {
            let fd = rustix::fs::openat(
                &self.handle,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )?;
            let mut held = Vec::with_capacity(body.len());
            fs::File::from(fd)
                .take(body.len() as u64 + 1)
                .read_to_end(&mut held)?;
            held == body
        };
        Ok(Some(if same {
            Answer::Duplicate
        } else {
            Answer::Refused(format!(
                "{name} exists in {} with other content: not published, not replaced",
                self.dir.display()
            ))
        }))
    }
}

/// A host name as one part of a file name: letters, digits, `-` and `_` kept, anything else `_`.
fn token(host: &str) -> String {
    let t: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if t.is_empty() { "_".to_string() } else { t }
}

/// The host and process id of a temporary name of ours: `.edi-inbox.HOST.PID.RANDOM.tmp`.
fn parse_temporary(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix(TMP_PREFIX)?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    let random = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    let hex = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !host.is_empty()).then_some((host, pid))
}

fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a folder",
        FileType::Fifo => "a pipe",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "not a file",
    }
}

impl Sink for DirSink {
    /// A failure to write (a full disk, no permission) is the folder's, not the event's: it
    /// ends the batch as a lost connection does, and nothing after it is marked.
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>) {
        let mut answers = Vec::with_capacity(batch.len());
        let mut failed = None;
        for o in &batch {
            match self.write(o) {
                Ok(a) => answers.push(a),
                Err(e) => {
                    failed = Some(SinkError::Lost(e));
                    break;
                }
            }
        }
        // The names are durable before the events are marked published, those written before
        // a failure too.
        if let Err(e) = rustix::fs::fsync(&self.handle) {
            let e = anyhow::Error::new(e).context(format!("cannot sync {}", self.dir.display()));
            return (Vec::new(), Some(SinkError::Lost(e)));
        }
        (answers, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_are_ours_only_in_their_exact_form() {
        assert_eq!(
            parse_temporary(".edi-inbox.host-1.4242.0123456789abcdef.tmp"),
            Some(("host-1", 4242))
        );
        for other in [
            ".edi-inbox.host.4242.0123.tmp",
            ".edi-inbox..4242.0123456789abcdef.tmp",
            ".edi-inbox.host.x.0123456789abcdef.tmp",
            ".0123.edi.4242.tmp",
            "edi-inbox.host.4242.0123456789abcdef.tmp",
        ] {
            assert_eq!(parse_temporary(other), None, "{other}");
        }
        assert_eq!(token("a.b c"), "a_b_c");
        assert_eq!(token(""), "_");
    }
}
