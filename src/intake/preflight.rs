//! What must hold before any input is taken, for every command that decides: an inbox that
//! exists or may be created, and a clock after 1970.

use crate::exit::ExitStatus;
use crate::inbox::Location;

/// Checks what must hold before anything is taken; `nothing` says what was not done ("read",
/// "consumed"). `Some` status to stop with.
///
/// `named` is true where `--db` or `EDI_INBOX_DB` named the database: only then may it be
/// created. A new inbox knows no interchange, so every redelivery would be applied again; a
/// cron job started in the wrong folder must not do that silently.
pub fn check(db: &Location, named: bool, nothing: &str) -> anyhow::Result<Option<ExitStatus>> {
    if !named && db.sqlite_path().is_some_and(|p| !p.exists()) {
        crate::output::warn(&format!(
            "there is no inbox database {} in this folder, and a new one is created only where --db or EDI_INBOX_DB names it (a new inbox would apply every redelivery again); nothing was {nothing}",
            db.shown()
        ));
        return Ok(Some(ExitStatus::Usage));
    }
    // Every decision records when it was made, and purge goes by those times: recorded as
    // 1970, they would all be purged at once, and every redelivery applied again.
    if crate::clock::before_1970() {
        anyhow::bail!(
            "the system clock reads a time before 1970; nothing was {nothing} or decided: set the clock, then run again"
        );
    }
    Ok(None)
}
