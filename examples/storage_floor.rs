//! The storage floor for `benches/scripts/e2e.sh`: what writing the same rows costs with no parsing at all.
//! Reads every file of a folder and inserts, in one transaction, an inbox row (keyed by the file
//! name), an interchange row with the file's bytes, and one message row per `UNH` (or X12 `ST`
//! segment), into a fresh
//! database with the same settings as edi-inbox (WAL, synchronous=FULL).
//!
//! `cargo run --release --example storage_floor -- DIR DB`

use std::path::PathBuf;

use rusqlite::{Connection, params};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let usage = "usage: storage_floor DIR DB";
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let db = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let _ = std::fs::remove_file(&db);
    let mut conn = Connection::open(&db)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE inbox (sender TEXT, recipient TEXT, control_ref TEXT, sha256 TEXT,
             source_file TEXT, received_at TEXT, interchange_id INTEGER,
             PRIMARY KEY (sender, recipient, control_ref)) WITHOUT ROWID;
         CREATE TABLE interchanges (id INTEGER PRIMARY KEY, sender TEXT, recipient TEXT,
             control_ref TEXT, source_file TEXT, received_at TEXT, raw BLOB);
         CREATE TABLE messages (id INTEGER PRIMARY KEY, interchange_id INTEGER, position INTEGER,
             raw_start INTEGER, raw_end INTEGER);",
    )?;
    let mut names: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    names.sort();
    let tx = conn.transaction()?;
    {
        let mut inbox = tx.prepare(
            "INSERT INTO inbox VALUES (?1, 'R', ?2, 'h', ?2, '2026-01-01T00:00:00.000Z', ?3)
             ON CONFLICT DO NOTHING",
        )?;
        let mut ic = tx.prepare(
            "INSERT INTO interchanges (sender, recipient, control_ref, source_file, received_at, raw)
             VALUES ('S', 'R', ?1, ?1, '2026-01-01T00:00:00.000Z', ?2)",
        )?;
        let mut msg = tx.prepare(
            "INSERT INTO messages (interchange_id, position, raw_start, raw_end) VALUES (?1, ?2, 0, 0)",
        )?;
        for path in &names {
            let bytes = std::fs::read(path)?;
            let name = path.to_string_lossy();
            ic.execute(params![name, bytes])?;
            let id = tx.last_insert_rowid();
            inbox.execute(params!["S", name, id])?;
            // A message starts at `UNH+`, an X12 transaction set at an `ST*` after a terminator
            // or a line break.
            let unh = bytes
                .windows(4)
                .filter(|w| *w == b"UNH+" || *w == b"~ST*" || *w == b"\nST*")
                .count();
            for n in 0..unh {
                msg.execute(params![id, n as i64])?;
            }
        }
    }
    tx.commit()?;
    eprintln!("{} files into {}", names.len(), db.display());
    Ok(())
}
