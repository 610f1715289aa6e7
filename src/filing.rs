//! Files in the drop folder: claiming one for this run, and moving it to the archive or the
//! quarantine without ever overwriting anything.

use std::fs::{self, File};
use std::io::{self, Read, Write};

use sha2::Digest;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A file this run holds: an exclusive advisory lock keeps an overlapping run off it until it
/// has been decided and moved.
#[derive(Debug)]
pub struct Claimed {
    /// Kept open for the lock; dropping it lets the other run have the file. `None` for a file
    /// that cannot be opened (no lock to take; it is only ever moved, never read).
    handle: Option<File>,
    /// What the path named when it was claimed, to tell later whether it still does.
    pub identity: Identity,
}

/// Which bytes a path names: the file (device and inode), its size and its modification time.
/// A partner's upload under the same name changes at least one of them: an atomic rename gives
/// another inode, an overwrite in place or an append another size or time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    pub len: u64,
    mtime: Option<SystemTime>,
}

impl Identity {
    /// Device and inode.
    pub fn file_id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    pub fn of(meta: &fs::Metadata) -> Identity {
        let (dev, ino) = file_id(meta).unwrap_or_default();
        Identity {
            dev,
            ino,
            len: meta.len(),
            mtime: meta.modified().ok(),
        }
    }
}

/// What claiming a file gave.
#[derive(Debug)]
pub enum Claim {
    Taken(Claimed),
    /// Gone since the walk, or held by another run: that run deals with it.
    Gone,
    /// Modified more recently than `--min-age`: a partner may still be writing it.
    TooYoung(Duration),
    /// Larger than `--max-size`; not read, but held, so that it is moved only as it was.
    TooLarge(Claimed),
    /// It cannot be opened (permission denied): not read, but known by its identity, so that
    /// it can be quarantined as it was, once old enough.
    Unreadable(Claimed, io::Error),
}

/// Opens and locks a file, without reading it yet. `named` files (given on the command line)
/// that do not exist are an error; files found in a folder that have gone are [`Claim::Gone`].
pub fn claim(path: &Path, named: bool, min_age: Duration, max_size: u64) -> io::Result<Claim> {
    let handle = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !named => return Ok(Claim::Gone),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            // Its age and identity can still be had from its folder.
            let meta = fs::metadata(path)?;
            if let Some(age) = too_young(&meta, min_age)? {
                return Ok(Claim::TooYoung(age));
            }
            let claimed = Claimed {
                handle: None,
                identity: Identity::of(&meta),
            };
            return Ok(Claim::Unreadable(claimed, e));
        }
        Err(e) => return Err(e),
    };
    match handle.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(Claim::Gone),
        Err(fs::TryLockError::Error(e)) => return Err(e),
    }
    // The other run may have moved the file away between our open and our lock: then the path
    // names another file, or none, and ours is not in the drop folder any more.
    let held = handle.metadata()?;
    match fs::metadata(path) {
        Ok(now) if same_file(&held, &now) => {}
        Ok(_) => return Ok(Claim::Gone),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Claim::Gone),
        Err(e) => return Err(e),
    }
    if let Some(age) = too_young(&held, min_age)? {
        return Ok(Claim::TooYoung(age));
    }
    let claimed = Claimed {
        handle: Some(handle),
        identity: Identity::of(&held),
    };
    if held.len() > max_size {
        return Ok(Claim::TooLarge(claimed));
    }
    Ok(Claim::Taken(claimed))
}

/// The file's age where it is younger than `min_age`. A modification time in the future (a
/// partner's clock, or a copy that kept the sender's time) counts as old enough: skipping it
/// would leave the file in place forever.
fn too_young(meta: &fs::Metadata, min_age: Duration) -> io::Result<Option<Duration>> {
    if min_age.is_zero() {
        return Ok(None);
    }
    let modified = meta.modified()?;
    Ok(SystemTime::now()
        .duration_since(modified)
        .ok()
        .filter(|age| *age < min_age))
}

/// What reading a claimed file gave.
#[derive(Debug)]
pub enum Contents {
    Bytes(Vec<u8>),
    /// The file changed while it was read (a partner still writing, or overwriting it in
    /// place): what was read may be half of one and half of another, so it is not decided.
    Changed,
}

impl Claimed {
    /// Reads the whole file, and checks that it did not change meanwhile.
    pub fn read(&mut self) -> io::Result<Contents> {
        let Some(handle) = &self.handle else {
            return Err(io::ErrorKind::PermissionDenied.into());
        };
        let mut bytes = Vec::with_capacity(self.identity.len as usize);
        (&*handle).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != self.identity.len
            || Identity::of(&handle.metadata()?) != self.identity
        {
            return Ok(Contents::Changed);
        }
        Ok(Contents::Bytes(bytes))
    }

    /// True while `path` still names the very bytes that were read: the same file, unchanged.
    /// Checked just before a file is moved, so that a new upload under the same name (which a
    /// partner reusing fixed names makes) is left for the next run rather than archived unread.
    pub fn still_at(&self, path: &Path) -> io::Result<bool> {
        let now = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let held = match &self.handle {
            Some(h) => Identity::of(&h.metadata()?) == self.identity,
            None => true,
        };
        Ok(held && Identity::of(&now) == self.identity)
    }
}

fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    file_id(a) == file_id(b)
}

/// The device and inode of a file: which file it is, whatever name it has.
#[cfg(unix)]
pub fn file_id(m: &fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((m.dev(), m.ino()))
}

/// Elsewhere files have no device and inode here: only names and times are compared.
#[cfg(not(unix))]
pub fn file_id(_: &fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// The longest file name most file systems take (`NAME_MAX` on Linux, in bytes).
const NAME_MAX: usize = 255;

/// Room kept after a name for what a move may add: a clash suffix (`.9999`) and, in the
/// quarantine, the reason's `.error.txt`.
const SUFFIX_ROOM: usize = ".9999".len() + NOTE_SUFFIX.len();

/// The end of the name of the note beside a quarantined file (`NAME.error.txt`), which a walk
/// passes over.
pub const NOTE_SUFFIX: &str = ".error.txt";

/// The name a file gets in the archive or quarantine: its own, byte for byte (names need not be
/// UTF-8, and rewriting them made two names one); shortened, with a hash of the whole name
/// to keep it apart from others, only where the suffixes a move may add would make it longer
/// than a file system takes.
fn target_name(name: &[u8]) -> Vec<u8> {
    if name.len() + SUFFIX_ROOM <= NAME_MAX {
        return name.to_vec();
    }
    let tag = format!("~{}", &hex::encode(sha2::Sha256::digest(name))[..12]);
    let ext = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 && name.len() - dot <= 16 => &name[dot..],
        _ => &[][..],
    };
    let mut keep = NAME_MAX - SUFFIX_ROOM - tag.len() - ext.len();
    // Cut a UTF-8 name between two characters, not inside one.
    if let Ok(text) = std::str::from_utf8(name) {
        while keep > 0 && !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
    let mut out = name[..keep].to_vec();
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(ext);
    out
}

/// The name for the `n`th clash: `inv.edi`, `inv.1.edi`, `inv.2.edi`...
fn candidate(name: &[u8], n: usize) -> Vec<u8> {
    if n == 0 {
        return name.to_vec();
    }
    match name.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 => {
            let mut out = name[..dot].to_vec();
            out.extend_from_slice(format!(".{n}").as_bytes());
            out.extend_from_slice(&name[dot..]);
            out
        }
        _ => {
            let mut out = name.to_vec();
            out.extend_from_slice(format!(".{n}").as_bytes());
            out
        }
    }
}

#[cfg(unix)]
fn os_bytes(s: &std::ffi::OsStr) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes()
}

#[cfg(unix)]
fn from_bytes(b: &[u8]) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(b).to_os_string()
}

#[cfg(not(unix))]
fn os_bytes(s: &std::ffi::OsStr) -> &[u8] {
    s.to_str().unwrap_or("file").as_bytes()
}

#[cfg(not(unix))]
fn from_bytes(b: &[u8]) -> std::ffi::OsString {
    String::from_utf8_lossy(b).into_owned().into()
}

/// Where a move left a file.
#[derive(Debug, PartialEq, Eq)]
pub enum Moved {
    /// Placed at this path.
    To(PathBuf),
    /// An earlier run, interrupted between placing its copy and removing the original, had
    /// already placed these very bytes at this path; the original is now removed.
    AlreadyThere(PathBuf),
    /// The path names other bytes than were read (a new upload under the same name): left in
    /// place for the next run.
    Changed,
    /// The path names nothing any more (the partner took the file back): nothing to move.
    Gone,
}

/// Why a file could not be moved, in words for the operator, and the error behind it.
#[derive(Debug)]
pub struct MoveError {
    pub what: String,
    pub source: io::Error,
}

impl std::fmt::Display for MoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for MoveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn failed(what: impl Into<String>) -> impl FnOnce(io::Error) -> MoveError {
    let what = what.into();
    move |source| MoveError { what, source }
}

/// Moves `src` into `dir` under its own file name (never a path from the input: nothing can land
/// outside `dir`), adding a numeric suffix where the name is taken. Never overwrites.
///
/// With `claim`, only the bytes that were read are moved: where the path names another file
/// now, or the same one changed, it is left in place ([`Moved::Changed`]); and where a new
/// upload took the name in the instant between that check and the rename, it is put back.
///
/// Across file systems it copies (from the claimed handle, so the very bytes that were read)
/// under a hidden temporary name, syncs, renames into place, then removes the source; where the
/// source cannot be removed, the copy is taken back, so that a file is never in both places for
/// good. A temporary file is locked while it is written, so that [`remove_stale_temporaries`]
/// knows one that a killed run left.
///
/// With a `reason`, `NAME.error.txt` is written beside it first, so that a crash can leave a
/// reason without its file (the file stays in the drop folder for the next run) but never a
/// quarantined file without its reason.
pub fn move_into(
    src: &Path,
    dir: &Path,
    reason: Option<&str>,
    claim: Option<&Claimed>,
) -> Result<Moved, MoveError> {
    fs::create_dir_all(dir).map_err(failed(format!("cannot create {}", dir.display())))?;
    let name = src.file_name().ok_or_else(|| MoveError {
        what: "cannot move it".into(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
    })?;
    let name = target_name(os_bytes(name));
    if fs::symlink_metadata(src).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        return Ok(Moved::Gone);
    }
    if let Some(c) = claim
        && !c.still_at(src).map_err(failed("cannot look at it"))?
    {
        return Ok(Moved::Changed);
    }
    match place(src, dir, &name, reason) {
        Ok(dest) => {
            if let Some(c) = claim {
                // Another upload may have taken the name between the check and the rename.
                if !c
                    .still_at(&dest)
                    .map_err(failed("cannot look at the moved file"))?
                {
                    return put_back(&dest, src);
                }
            }
            sync_dir(dir);
            Ok(Moved::To(dest))
        }
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            move_across(src, dir, &name, reason, claim)
        }
        // Taken meanwhile (an overlapping run quarantining a file nobody may open, which no lock
        // keeps to one run).
        Err(e) if e.kind() == io::ErrorKind::NotFound && fs::symlink_metadata(src).is_err() => {
            Ok(Moved::Gone)
        }
        Err(e) => Err(MoveError {
            what: format!("cannot move it into {}", dir.display()),
            source: e,
        }),
    }
}

/// Undoes a rename that took a new upload rather than the file that was read.
fn put_back(dest: &Path, src: &Path) -> Result<Moved, MoveError> {
    let _ = fs::remove_file(reason_path(dest));
    rename_noreplace(dest, src).map_err(failed(format!(
        "a new file under its name was moved to {} by mistake and cannot be put back; move it back into the drop folder",
        dest.display()
    )))?;
    Ok(Moved::Changed)
}

/// The copy-then-remove move between two file systems.
fn move_across(
    src: &Path,
    dir: &Path,
    name: &[u8],
    reason: Option<&str>,
    claim: Option<&Claimed>,
) -> Result<Moved, MoveError> {
    if let Some(there) = identical_copy(src, dir, name) {
        remove_source(src, claim)?;
        return Ok(Moved::AlreadyThere(there));
    }
    let tmp = dir.join(format!(
        "{TEMP_PREFIX}{}-{}{TEMP_SUFFIX}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    // Held (and locked) until the copy is in place, so no other run takes it for stale.
    let _held = copy_synced(src, claim, &tmp).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        MoveError {
            what: format!(
                "cannot copy it into {} (nothing was left there)",
                dir.display()
            ),
            source: e,
        }
    })?;
    let dest = place(&tmp, dir, name, reason).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        MoveError {
            what: format!("cannot place its copy in {}", dir.display()),
            source: e,
        }
    })?;
    sync_dir(dir);
    crash_point!("after-copy-placed");
    if let Err(e) = remove_source(src, claim) {
        // In both places for good is worse than in neither: take the copy back.
        let _ = fs::remove_file(&dest);
        let _ = fs::remove_file(reason_path(&dest));
        sync_dir(dir);
        return Err(MoveError {
            what: format!(
                "copied into {}, but {}; the copy was taken back, and the file stays where it is",
                dir.display(),
                e.what
            ),
            source: e.source,
        });
    }
    Ok(Moved::To(dest))
}

/// Removes the source of a copy, where it is still the file that was read.
fn remove_source(src: &Path, claim: Option<&Claimed>) -> Result<(), MoveError> {
    // A new upload that took the name is not ours to remove.
    if let Some(c) = claim
        && !c
            .still_at(src)
            .map_err(failed("cannot look at the original"))?
    {
        return Ok(());
    }
    fs::remove_file(src).map_err(failed("the original cannot be removed"))?;
    if let Some(parent) = src.parent() {
        sync_dir(parent);
    }
    Ok(())
}

/// A file in `dir` under one of the names `name` would get, holding the bytes of `src`: the copy
/// an interrupted cross-file-system move placed before it could remove its source.
fn identical_copy(src: &Path, dir: &Path, name: &[u8]) -> Option<PathBuf> {
    let len = fs::metadata(src).ok()?.len();
    let mut ours: Option<Vec<u8>> = None;
    for n in 0..10_000 {
        let path = dir.join(from_bytes(&candidate(name, n)));
        let Ok(meta) = fs::symlink_metadata(&path) else {
            return None;
        };
        if !meta.is_file() || meta.len() != len {
            continue;
        }
        if ours.is_none() {
            ours = Some(fs::read(src).ok()?);
        }
        if fs::read(&path).ok().as_ref() == ours.as_ref() {
            return Some(path);
        }
    }
    None
}

/// Hidden names of the temporary copies of cross-file-system moves.
const TEMP_PREFIX: &str = ".edi-inbox-";
const TEMP_SUFFIX: &str = ".tmp";
static TEMP_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How old an unlocked temporary copy must be to be taken for a killed run's.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Removes the temporary copies in `dir` that a killed run left (a run holds a lock on each of
/// its own while it writes it); returns how many went.
pub fn remove_stale_temporaries(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX)) {
            continue;
        }
        let path = e.path();
        // A run creates its copy and locks it an instant later: one that young is left alone.
        let young = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() < STALE_AFTER);
        if young {
            continue;
        }
        let Ok(f) = File::open(&path) else { continue };
        if f.try_lock().is_ok() && fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Makes sure files can be moved into `dir` before anything is decided: it exists (or is
/// created) as a folder, and a file can be created in it (one without a name where the file
/// system can make one, so that a run killed here leaves nothing) and removed again. Temporary copies
/// that a killed run left there are removed on the way. A misconfigured folder was noticed only
/// file by file, after the decisions were committed.
pub fn check_target(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    if !fs::metadata(dir)?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "it is not a folder",
        ));
    }
    remove_stale_temporaries(dir);
    // A file without a name first (O_TMPFILE): a run killed while it checks leaves nothing
    // behind. Where the file system cannot make one, a named file, created and removed.
    {
        use rustix::fs::{CWD, Mode, OFlags, openat};
        match openat(
            CWD,
            dir,
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(_) => return Ok(()),
            Err(e)
                if e == rustix::io::Errno::OPNOTSUPP
                    || e == rustix::io::Errno::ISDIR
                    || e == rustix::io::Errno::INVAL
                    || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    let probe = dir.join(format!(
        "{TEMP_PREFIX}{}-check{TEMP_SUFFIX}",
        std::process::id()
    ));
    let held = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    // Locked like a copy in progress, so that an overlapping run's clean-up leaves it; one that
    // took it all the same has removed it already.
    let _ = held.lock();
    match fs::remove_file(&probe) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Renames `src` to the first free candidate name in `dir`, after writing its reason beside it.
fn place(src: &Path, dir: &Path, name: &[u8], reason: Option<&str>) -> io::Result<PathBuf> {
    for n in 0..10_000 {
        let dest = dir.join(from_bytes(&candidate(name, n)));
        let reason_file = match reason {
            Some(text) => match write_new(&reason_path(&dest), text) {
                Ok(p) => {
                    crash_point!("after-reason");
                    Some(p)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            },
            None => None,
        };
        match rename_noreplace(src, &dest) {
            Ok(()) => return Ok(dest),
            Err(e) => {
                if let Some(p) = reason_file {
                    let _ = fs::remove_file(p);
                }
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "10000 files named like {} are already there",
            String::from_utf8_lossy(name)
        ),
    ))
}

/// Copies the claimed file (or, unclaimed, the file at `src`) to a new file `dest`, locked,
/// synced; returns the open copy, whose lock marks it as in use.
fn copy_synced(src: &Path, claim: Option<&Claimed>, dest: &Path) -> io::Result<File> {
    let mut to = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)?;
    to.lock()?;
    match claim.and_then(|c| c.handle.as_ref()) {
        Some(mut from) => {
            io::Seek::seek(&mut from, io::SeekFrom::Start(0))?;
            io::copy(&mut from, &mut to)?;
        }
        None => {
            io::copy(&mut File::open(src)?, &mut to)?;
        }
    }
    to.sync_all()?;
    Ok(to)
}

/// Makes a rename durable: the directory entry is on disk once this returns.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// An atomic rename that fails with `AlreadyExists` rather than replace `dest`.
#[cfg(target_os = "linux")]
fn rename_noreplace(src: &Path, dest: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use rustix::io::Errno;
    match renameat_with(CWD, src, CWD, dest, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // File systems without RENAME_NOREPLACE: a hard link is just as exclusive.
        Err(Errno::INVAL | Errno::NOSYS) => link_then_unlink(src, dest),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(src: &Path, dest: &Path) -> io::Result<()> {
    link_then_unlink(src, dest)
}

fn link_then_unlink(src: &Path, dest: &Path) -> io::Result<()> {
    fs::hard_link(src, dest)?;
    fs::remove_file(src)
}

/// The quarantine's note of a reprocessed file, once the file went from `old` to `new`: where
/// it went back to the quarantine with a new note of its own (`superseded`), the old one is
/// removed; where it went to the archive, the note goes with it (`NEW.error.txt`, why it was
/// quarantined once), never over another note. No note (removed by hand) is nothing to do.
pub fn carry_note(old: &Path, new: &Path, superseded: bool) -> io::Result<()> {
    let note = reason_path(old);
    let result = if superseded {
        fs::remove_file(&note)
    } else {
        let dest = reason_path(new);
        match rename_noreplace(&note, &dest) {
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
                write_new(&dest, &fs::read_to_string(&note)?)?;
                fs::remove_file(&note)
            }
            other => other,
        }
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound && !note.exists() => Ok(()),
        other => other,
    }
}

/// `NAME.error.txt` beside `NAME`.
pub fn reason_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(NOTE_SUFFIX);
    PathBuf::from(name)
}

/// Creates `path` (failing if it exists) with `text`, synced.
fn write_new(path: &Path, text: &str) -> io::Result<PathBuf> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clashing_names_get_a_suffix() {
        assert_eq!(candidate(b"inv.edi", 0), b"inv.edi");
        assert_eq!(candidate(b"inv.edi", 2), b"inv.2.edi");
        assert_eq!(candidate(b"inv", 1), b"inv.1");
        assert_eq!(candidate(b".x", 1), b".x.1");
        assert_eq!(candidate(b"a\xff.edi", 1), b"a\xff.1.edi");
    }

    #[test]
    fn long_names_are_shortened_keeping_extension_and_characters() {
        let short = b"inv.edi".to_vec();
        assert_eq!(target_name(&short), short);
        let long = format!("{}.edi", "é".repeat(200));
        let t = target_name(long.as_bytes());
        assert!(t.len() + SUFFIX_ROOM <= NAME_MAX, "{}", t.len());
        let text = String::from_utf8(t).expect("cut between characters");
        assert!(text.ends_with(".edi") && text.contains('~'), "{text}");
        let other = format!("{}.edi", "é".repeat(201));
        assert_ne!(target_name(other.as_bytes()), text.as_bytes());
    }

    #[test]
    fn only_temporaries_nobody_holds_are_stale() {
        let dir = tempfile::tempdir().unwrap();
        let held = dir.path().join(".edi-inbox-1-1.tmp");
        let left = dir.path().join(".edi-inbox-2-1.tmp");
        let other = dir.path().join("a.tmp");
        let young = dir.path().join(".edi-inbox-3-1.tmp");
        let old = SystemTime::now() - 2 * STALE_AFTER;
        for p in [&held, &left, &other, &young] {
            fs::write(p, "x").unwrap();
            if p != &young {
                File::options()
                    .write(true)
                    .open(p)
                    .unwrap()
                    .set_modified(old)
                    .unwrap();
            }
        }
        let lock = File::open(&held).unwrap();
        lock.lock().unwrap();
        assert_eq!(remove_stale_temporaries(dir.path()), 1);
        assert!(held.exists() && !left.exists() && other.exists());
        // One created an instant ago may be a live run's, about to be locked.
        assert!(young.exists());
    }

    #[test]
    fn moves_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("archive");
        for content in ["one", "two", "three"] {
            let src = dir.path().join("inv.edi");
            fs::write(&src, content).unwrap();
            move_into(&src, &archive, None, None).unwrap();
            assert!(!src.exists());
        }
        let read = |n: &str| fs::read_to_string(archive.join(n)).unwrap();
        assert_eq!(read("inv.edi"), "one");
        assert_eq!(read("inv.1.edi"), "two");
        assert_eq!(read("inv.2.edi"), "three");
    }

    /// /dev/shm is a tmpfs, another file system than the temporary folder on most Linux hosts.
    #[cfg(target_os = "linux")]
    #[test]
    fn moves_across_file_systems_copy_then_remove() {
        use std::os::unix::fs::MetadataExt;
        let here = tempfile::tempdir().unwrap();
        let Ok(there) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("no /dev/shm: not checked");
            return;
        };
        let dev = |p: &Path| fs::metadata(p).unwrap().dev();
        if dev(here.path()) == dev(there.path()) {
            eprintln!("/dev/shm is on the same file system here: not checked");
            return;
        }
        let src = here.path().join("inv.edi");
        fs::write(&src, "payload").unwrap();
        fs::write(there.path().join("inv.edi"), "older").unwrap();
        let Moved::To(dest) = move_into(&src, there.path(), None, None).unwrap() else {
            panic!("not moved")
        };
        assert_eq!(dest, there.path().join("inv.1.edi"));
        assert_eq!(fs::read_to_string(&dest).unwrap(), "payload");
        assert_eq!(
            fs::read_to_string(there.path().join("inv.edi")).unwrap(),
            "older"
        );
        assert!(!src.exists());
        let left: Vec<_> = fs::read_dir(there.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file is left behind");
    }

    #[test]
    fn a_locked_file_is_left_to_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.edi");
        fs::write(&path, "x").unwrap();
        let first = claim(&path, false, Duration::ZERO, 1 << 20).unwrap();
        assert!(matches!(first, Claim::Taken(_)));
        assert!(matches!(
            claim(&path, false, Duration::ZERO, 1 << 20).unwrap(),
            Claim::Gone
        ));
        drop(first);
        assert!(matches!(
            claim(&path, false, Duration::ZERO, 1).unwrap(),
            Claim::Taken(_)
        ));
        assert!(matches!(
            claim(&path, false, Duration::ZERO, 0).unwrap(),
            Claim::TooLarge(c) if c.identity.len == 1
        ));
        assert!(matches!(
            claim(&path, false, Duration::from_secs(3600), 1).unwrap(),
            Claim::TooYoung(_)
        ));
        assert!(matches!(
            claim(&dir.path().join("gone.edi"), false, Duration::ZERO, 1).unwrap(),
            Claim::Gone
        ));
        assert!(claim(&dir.path().join("gone.edi"), true, Duration::ZERO, 1).is_err());
    }
}
