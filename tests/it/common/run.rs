//! A finished run of a command: what it was (its command line, secrets masked), how it ended,
//! and what it wrote. Its assertions say why they failed: on a wrong exit status they show the
//! command, the status wanted and the one it had, its standard error and the end of its standard
//! output (as ripgrep's `assert_exit_code` does).

use std::ffi::OsStr;
use std::fmt;
use std::process::{ExitStatus, Output};

/// How many lines of standard output a failure shows (the last ones).
const STDOUT_TAIL: usize = 20;

/// A finished run.
pub struct Run {
    /// The command line as shown: environment set for it, program and arguments, any password
    /// in a URL replaced by `***`.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs a command to its end, its output kept.
pub trait RunExt {
    fn run(&mut self) -> Run;
}

/// Starts a command (its standard output and error as set on it), for a [`Running`] child.
pub trait StartExt {
    fn start(&mut self) -> Running;
}

impl RunExt for std::process::Command {
    fn run(&mut self) -> Run {
        let out = self
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", shown_std(self)));
        Run::new(shown_std(self), out)
    }
}

impl StartExt for std::process::Command {
    fn start(&mut self) -> Running {
        let command = shown_std(self);
        let child = self
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        Running {
            command,
            child: Some(child),
        }
    }
}

/// A child process started from a command, which it remembers for its [`Run`]; killed and
/// reaped however the test ends, unless waited for.
pub struct Running {
    pub command: String,
    child: Option<std::process::Child>,
}

impl Running {
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// The child itself (to take a pipe, or to try waiting).
    pub fn child(&mut self) -> &mut std::process::Child {
        self.child.as_mut().expect("not waited for yet")
    }

    /// Sends it `signal` (SIGTERM, say).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the process id of a child not yet reaped.
        unsafe { libc::kill(self.id() as i32, signal) };
    }

    /// Waits for its end: the run, with what it wrote to pipes.
    pub fn wait(mut self) -> Run {
        let child = self.child.take().expect("not waited for yet");
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("cannot wait for {}: {e}", self.command));
        Run::new(std::mem::take(&mut self.command), out)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl RunExt for assert_cmd::Command {
    fn run(&mut self) -> Run {
        let command = shown(self.get_envs(), self.get_program(), self.get_args());
        let out = self
            .output()
            .unwrap_or_else(|e| panic!("cannot run {command}: {e}"));
        Run::new(command, out)
    }
}

impl Run {
    /// A run from its command line (as [`shown_std`] gives it) and its output.
    pub fn new(command: String, out: Output) -> Run {
        Run {
            command,
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }

    /// Panics, saying why, unless the run exited with `want`.
    #[track_caller]
    pub fn code(&self, want: i32) -> &Run {
        if self.status.code() != Some(want) {
            self.fail(&format!("exit {want}"));
        }
        self
    }

    /// Panics, saying why, unless the run exited with one of `want`.
    #[track_caller]
    pub fn code_in(&self, want: &[i32]) -> &Run {
        if !self.status.code().is_some_and(|c| want.contains(&c)) {
            let want: Vec<String> = want.iter().map(i32::to_string).collect();
            self.fail(&format!("exit {}", want.join(" or ")));
        }
        self
    }

    /// The same run with `note` shown with it (which round of a loop, say).
    pub fn note(mut self, note: impl fmt::Display) -> Run {
        self.command = format!("{}\nnote:    {note}", self.command);
        self
    }

    /// Panics, saying why, unless the run exited with 0.
    #[track_caller]
    pub fn success(&self) -> &Run {
        self.code(0)
    }

    /// Panics, saying why, unless the run was ended by a signal (a fail point's abort, a kill).
    #[track_caller]
    pub fn signalled(&self) -> &Run {
        if self.status.code().is_some() {
            self.fail("an end by a signal");
        }
        self
    }

    /// Standard output as JSON Lines; a line that is not JSON fails, the run shown.
    #[track_caller]
    pub fn json(&self) -> Vec<serde_json::Value> {
        self.out()
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a line is not JSON ({e}): {l}\n{self}"))
            })
            .collect()
    }

    /// Standard output as text.
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as text.
    pub fn err(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    #[track_caller]
    fn fail(&self, want: &str) -> ! {
        panic!("wanted {want}, got {}\n{self}", ended(&self.status))
    }
}

/// The command, how it ended, its standard error and the end of its standard output.
impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command: {}", self.command)?;
        writeln!(f, "status:  {}", ended(&self.status))?;
        let err = self.err();
        if err.trim().is_empty() {
            writeln!(f, "stderr:  (empty)")?;
        } else {
            writeln!(f, "stderr:\n{}", indent(err.trim_end()))?;
        }
        let out = self.out();
        let lines: Vec<&str> = out.lines().collect();
        if lines.is_empty() {
            write!(f, "stdout:  (empty)")
        } else if lines.len() > STDOUT_TAIL {
            write!(
                f,
                "stdout (the last {STDOUT_TAIL} of {} lines):\n{}",
                lines.len(),
                indent(&lines[lines.len() - STDOUT_TAIL..].join("\n"))
            )
        } else {
            write!(f, "stdout:\n{}", indent(&lines.join("\n")))
        }
    }
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `exit N`, or the signal that ended it.
fn ended(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => format!("{status}"),
    }
}

/// A standard library command's line as shown.
pub fn shown_std(cmd: &std::process::Command) -> String {
    shown(cmd.get_envs(), cmd.get_program(), cmd.get_args())
}

/// A command line as shown: the variables set for it (those removed left out), the program
/// and its arguments, each quoted where the shell would need it, any secret masked (see
/// [`masked`]; the value of a variable named for a secret, whole).
fn shown<'a>(
    envs: impl Iterator<Item = (&'a OsStr, Option<&'a OsStr>)>,
    program: &OsStr,
    args: impl Iterator<Item = &'a OsStr>,
) -> String {
    let mut words: Vec<String> = envs
        .filter_map(|(k, v)| {
            let (k, v) = (k.to_string_lossy(), v?.to_string_lossy());
            // A variable named for a secret (PGPASSWORD, say) is not shown at all.
            let secret = ["PASSWORD", "SECRET", "TOKEN"]
                .iter()
                .any(|s| k.to_ascii_uppercase().contains(s));
            let v = if secret { "***".into() } else { masked(&v) };
            Some(format!("{k}={}", quoted(&v)))
        })
        .collect();
    words.push(quoted(&program.to_string_lossy()));
    words.extend(args.map(|a| quoted(&masked(&a.to_string_lossy()))));
    words.join(" ")
}

/// `text` with the password of every URL in it (`scheme://user:PASSWORD@host`) and every
/// `password=VALUE` (a libpq connection string's) replaced by `***`.
pub fn masked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The authority ends at the first `/`, `?`, `#` or space.
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) if authority[..at].contains(':') => {
                let user = &authority[..authority[..at].find(':').unwrap()];
                out.push_str(user);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    let mut result = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("password") {
        let (before, after) = rest.split_at(at + "password".len());
        result.push_str(before);
        // `password=VALUE` or `password = 'VALUE WITH SPACES'`, as libpq takes them.
        let spaced = after.trim_start();
        let Some(value) = spaced.strip_prefix('=') else {
            rest = after;
            continue;
        };
        let value = value.trim_start();
        result.push_str("=***");
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted
                .char_indices()
                .find(|&(_, c)| {
                    let end = c == '\'' && !escaped;
                    escaped = c == '\\' && !escaped;
                    end
                })
                .map_or(quoted.len(), |(k, _)| k + 1);
            1 + close
        } else {
            value
                .find(|c: char| c.is_whitespace() || c == '&')
                .unwrap_or(value.len())
        };
        rest = &value[end..];
    }
    result.push_str(rest);
    result
}

/// A word as the shell would need it: as it is where plain, else in single quotes.
fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
