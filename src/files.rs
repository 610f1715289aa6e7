//! Files in the drop folder: claiming one for this run, and moving it to the archive or the
//! quarantine without ever overwriting anything.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A file this run holds: an exclusive advisory lock keeps an overlapping run off it until it
/// has been decided and moved.
#[derive(Debug)]
pub struct Claimed {
    /// Kept open for the lock; dropping it lets the other run have the file.
    pub handle: File,
    pub bytes: Vec<u8>,
}

/// What claiming a file gave.
#[derive(Debug)]
pub enum Claim {
    Taken(Claimed),
    /// Gone since the walk, or held by another run: that run deals with it.
    Gone,
    /// Modified more recently than `--min-age`: a partner may still be writing it.
    TooYoung(Duration),
    /// Larger than `--max-size`; not read.
    TooLarge(u64),
}

/// Opens, locks and reads a file. `named` files (given on the command line) that do not exist
/// are an error; files found in a folder that have gone are [`Claim::Gone`].
pub fn claim(path: &Path, named: bool, min_age: Duration, max_size: u64) -> io::Result<Claim> {
    let mut handle = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !named => return Ok(Claim::Gone),
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
    if !min_age.is_zero() {
        let age = SystemTime::now()
            .duration_since(held.modified()?)
            .unwrap_or(Duration::ZERO);
        if age < min_age {
            return Ok(Claim::TooYoung(age));
        }
    }
    if held.len() > max_size {
        return Ok(Claim::TooLarge(held.len()));
    }
    let mut bytes = Vec::with_capacity(held.len() as usize);
    handle.read_to_end(&mut bytes)?;
    Ok(Claim::Taken(Claimed { handle, bytes }))
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    a.len() == b.len() && a.modified().ok() == b.modified().ok()
}

/// The name for the `n`th clash: `inv.edi`, `inv.1.edi`, `inv.2.edi`...
fn candidate(name: &str, n: usize) -> String {
    if n == 0 {
        return name.to_string();
    }
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{n}.{ext}"),
        _ => format!("{name}.{n}"),
    }
}

/// Moves `src` into `dir` under its own file name (never a path from the input: nothing can land
/// outside `dir`), adding a numeric suffix where the name is taken. Never overwrites. Across file
/// systems it copies under a hidden temporary name, syncs, renames, then removes the source.
/// With a `reason`, `NAME.error.txt` is written beside it first, so that a crash can leave a
/// reason without its file (the file stays in the drop folder for the next run) but never a
/// quarantined file without its reason. Returns where the file went.
pub fn move_into(src: &Path, dir: &Path, reason: Option<&str>) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let name = src
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?
        .to_string_lossy()
        .into_owned();
    match place(src, dir, &name, reason) {
        Ok(dest) => {
            sync_dir(dir);
            Ok(dest)
        }
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let tmp = dir.join(format!(".{name}.edi-inbox-{}.tmp", std::process::id()));
            copy_synced(src, &tmp)?;
            let dest = place(&tmp, dir, &name, reason).inspect_err(|_| {
                let _ = fs::remove_file(&tmp);
            })?;
            sync_dir(dir);
            fs::remove_file(src)?;
            Ok(dest)
        }
        Err(e) => Err(e),
    }
}

/// Renames `src` to the first free candidate name in `dir`, after writing its reason beside it.
fn place(src: &Path, dir: &Path, name: &str, reason: Option<&str>) -> io::Result<PathBuf> {
    for n in 0..10_000 {
        let dest = dir.join(candidate(name, n));
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
        format!("10000 files named like {name} are already there"),
    ))
}

fn copy_synced(src: &Path, dest: &Path) -> io::Result<()> {
    let mut from = File::open(src)?;
    let mut to = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)?;
    io::copy(&mut from, &mut to)?;
    to.sync_all()
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
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
    };
    let (s, d) = (c(src)?, c(dest)?);
    // SAFETY: both are valid NUL-terminated paths that live across the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            s.as_ptr(),
            libc::AT_FDCWD,
            d.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // File systems without RENAME_NOREPLACE: a hard link is just as exclusive.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => link_then_unlink(src, dest),
        _ => Err(e),
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

/// `NAME.error.txt` beside `NAME`.
pub fn reason_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".error.txt");
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
        assert_eq!(candidate("inv.edi", 0), "inv.edi");
        assert_eq!(candidate("inv.edi", 2), "inv.2.edi");
        assert_eq!(candidate("inv", 1), "inv.1");
        assert_eq!(candidate(".x", 1), ".x.1");
    }

    #[test]
    fn moves_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("archive");
        for content in ["one", "two", "three"] {
            let src = dir.path().join("inv.edi");
            fs::write(&src, content).unwrap();
            move_into(&src, &archive, None).unwrap();
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
        let dest = move_into(&src, there.path(), None).unwrap();
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
            Claim::TooLarge(1)
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
