//! Which files a run reads: paths named on the command line, and the regular files under the
//! folders among them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use crate::filing::file_id;

/// A file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    pub path: PathBuf,
    /// True where the path was named on the command line rather than found in a folder.
    pub named: bool,
}

/// A path that could not be taken, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputProblem {
    pub path: PathBuf,
    pub message: String,
}

/// True for names a walk passes over: hidden ones, files still being written by a transfer
/// (`.tmp`, `.part`, `.partial`), and the quarantine's notes (`NAME.error.txt`), which go back to
/// the drop folder with their file when it is reprocessed and are no interchange.
pub fn is_skipped_name(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with(".tmp")
        || name.ends_with(".part")
        || name.ends_with(".partial")
        || name.ends_with(crate::filing::NOTE_SUFFIX)
}

/// What a run must never read as input: its own database (and the files SQLite keeps beside it),
/// its metrics file, and the folders it moves files into.
#[derive(Debug, Default)]
pub struct Exclusions {
    /// Files, by folder and name, so that those not created yet are known too.
    files: Vec<(PathBuf, std::ffi::OsString, &'static str)>,
    /// Folders, by device and inode.
    folders: Vec<((u64, u64), &'static str)>,
    /// Files, by device and inode, where they exist: a link, a bind mount or a hard link gives
    /// the same file another name.
    ids: Vec<((u64, u64), &'static str)>,
}

impl Exclusions {
    /// The database at `db` with its `-wal`, `-shm`, `-journal` and `-publish.lock`, under the name given and,
    /// where that is a symbolic link, where SQLite keeps them: beside the file it links to.
    pub fn database(&mut self, db: &Path) -> &mut Self {
        let real = fs::canonicalize(db).ok();
        for base in std::iter::once(db).chain(real.as_deref()) {
            for suffix in ["", "-wal", "-shm", "-journal", "-publish.lock"] {
                let mut name = base.as_os_str().to_owned();
                name.push(suffix);
                self.file(Path::new(&name), "the inbox database");
            }
        }
        self
    }

    /// One file, which need not exist yet.
    pub fn file(&mut self, path: &Path, what: &'static str) -> &mut Self {
        if let (Some(folder), Some(name)) = (real_folder(path), path.file_name()) {
            self.files.push((folder, name.to_owned(), what));
        }
        if let Some(id) = fs::metadata(path).ok().as_ref().and_then(file_id) {
            self.ids.push((id, what));
        }
        self
    }

    /// What the file with this device and inode is, where it is one of the excluded files: a
    /// reader checks each file it claims, whatever name it was found under.
    pub fn excluded_id(&self, id: (u64, u64)) -> Option<&'static str> {
        self.ids
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, what)| *what)
    }

    /// A folder and everything under it; nothing where it does not exist (then it holds nothing).
    pub fn folder(&mut self, path: &Path, what: &'static str) -> &mut Self {
        if let Some(id) = fs::metadata(path).ok().as_ref().and_then(file_id) {
            self.folders.push((id, what));
        }
        self
    }

    fn excluded_file(&self, path: &Path) -> Option<&'static str> {
        let name = path.file_name()?;
        // Only a name that matches pays for resolving its folder.
        let mut matching = self.files.iter().filter(|(_, n, _)| n == name).peekable();
        matching.peek()?;
        let folder = real_folder(path)?;
        matching
            .find(|(f, _, _)| *f == folder)
            .map(|(_, _, what)| *what)
    }

    fn excluded_folder(&self, meta: &fs::Metadata) -> Option<&'static str> {
        let id = file_id(meta)?;
        self.folders
            .iter()
            .find(|(f, _)| *f == id)
            .map(|(_, what)| *what)
    }
}

/// The folder of `path` with every link resolved.
fn real_folder(path: &Path) -> Option<PathBuf> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::canonicalize(parent).ok()
}

/// Collects the files under `paths`, in the order of the arguments and, within a folder, sorted
/// by name at each level. Folders are walked without following symbolic links.
///
/// A path named on the command line that does not exist is a problem. A file found in a folder
/// that disappears during the walk was taken by another run, and is passed over quietly.
/// What `exclude` names is never taken: found in a folder it is passed over; named on the
/// command line it is a problem.
pub fn collect(paths: &[PathBuf], exclude: &Exclusions) -> (Vec<InputFile>, Vec<InputProblem>) {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for path in paths {
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                problems.push(InputProblem {
                    path: path.clone(),
                    message: describe(&e),
                });
                continue;
            }
        };
        if meta.is_file() {
            if let Some(what) = exclude.excluded_file(path) {
                problems.push(InputProblem {
                    path: path.clone(),
                    message: format!("is {what}: not read"),
                });
                continue;
            }
            if seen.insert(path.clone()) {
                files.push(InputFile {
                    path: path.clone(),
                    named: true,
                });
            }
            continue;
        }
        if !meta.is_dir() {
            problems.push(InputProblem {
                path: path.clone(),
                message: "is neither a regular file nor a folder".into(),
            });
            continue;
        }
        if let Some(what) = exclude.excluded_folder(&meta) {
            problems.push(InputProblem {
                path: path.clone(),
                message: format!("is {what}: files there would be moved onto themselves; not read"),
            });
            continue;
        }
        // An archive or quarantine folder inside a scanned folder is passed over, or every run
        // would read what earlier runs moved there (and quarantine the reasons as input).
        let walk = WalkDir::new(path)
            .follow_links(false)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                e.depth() == 0
                    || !(is_skipped_name(&e.file_name().to_string_lossy())
                        || e.file_type().is_dir()
                            && e.metadata()
                                .is_ok_and(|m| exclude.excluded_folder(&m).is_some()))
            });
        for entry in walk {
            match entry {
                Ok(e) if e.file_type().is_file() => {
                    if exclude.excluded_file(e.path()).is_some() {
                        continue;
                    }
                    if seen.insert(e.path().to_path_buf()) {
                        files.push(InputFile {
                            path: e.into_path(),
                            named: false,
                        });
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let vanished = e
                        .io_error()
                        .is_some_and(|io| io.kind() == io::ErrorKind::NotFound);
                    if !vanished {
                        let path = e.path().unwrap_or(path).to_path_buf();
                        let message = match e.io_error() {
                            Some(io) => describe(io),
                            None => e.to_string(),
                        };
                        problems.push(InputProblem { path, message });
                    }
                }
            }
        }
    }
    (files, problems)
}

/// The paths named on the command line that do not exist (a link to nothing counts), each with
/// what it may be: a drop folder not mounted or misnamed, or a shell pattern that matched
/// nothing (the shell then passes the pattern itself, `drop/*.edi`). A run given one has been
/// started wrongly: it is a failure of its configuration, not input to reject.
pub fn missing(paths: &[PathBuf]) -> Vec<(PathBuf, &'static str)> {
    paths
        .iter()
        .filter(|p| fs::metadata(p).is_err_and(|e| e.kind() == io::ErrorKind::NotFound))
        .map(|p| {
            let shown = display(p);
            let why = if shown.contains(['*', '?', '[']) {
                "a shell pattern that matched nothing?"
            } else {
                "a drop folder not mounted, or misnamed?"
            };
            (p.clone(), why)
        })
        .collect()
}

/// Reads a whole file. `Ok(None)` where a file found in a folder has gone since the walk.
pub fn read(file: &InputFile) -> io::Result<Option<Vec<u8>>> {
    match fs::read(&file.path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && !file.named => Ok(None),
        Err(e) => Err(e),
    }
}

/// A short reason for an I/O error, without the "(os error N)" noise.
pub fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "does not exist".into(),
        io::ErrorKind::PermissionDenied => "cannot be read: permission denied".into(),
        _ => format!("cannot be read: {e}"),
    }
}

/// The path as text for output and the database; bytes that are not UTF-8 are shown as `\xNN`,
/// so that two names that differ only there stay apart (replacement characters made them one).
pub fn display(path: &Path) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let mut s = String::new();
        for chunk in path.as_os_str().as_bytes().utf8_chunks() {
            s.push_str(chunk.valid());
            for b in chunk.invalid() {
                s.push_str(&format!("\\x{b:02X}"));
            }
        }
        s
    }
    #[cfg(not(unix))]
    {
        path.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn names_that_are_not_utf8_show_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"d/inv\xff\xfe\xc3\xbc.edi");
        assert_eq!(display(Path::new(name)), "d/inv\\xFF\\xFE\u{fc}.edi");
    }

    #[test]
    fn skips_hidden_and_partial_names() {
        for name in [
            ".hidden",
            "a.tmp",
            "b.part",
            "c.partial",
            "inv.edi.error.txt",
        ] {
            assert!(is_skipped_name(name), "{name}");
        }
        for name in [
            "a.edi",
            "part",
            "a.tmp.edi",
            "error.txt.edi",
            "a.error.txt.edi",
        ] {
            assert!(!is_skipped_name(name), "{name}");
        }
    }
}
