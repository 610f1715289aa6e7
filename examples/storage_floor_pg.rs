//! The PostgreSQL storage floor for `benches/scripts/postgres.sh`: what writing the same rows
//! costs on the server with no parsing, hashing or outbox at all. Reads every file of a folder and
//! writes, in one transaction with binary COPY, an inbox row (keyed by the file name), an
//! interchange row with the file's bytes, and one message row per `UNH`, into tables of a fresh
//! schema `storage_floor` (dropped first), with the server's own durability settings.
//!
//! `cargo run --release --example storage_floor_pg -- URL DIR`

use std::path::PathBuf;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{Client, NoTls};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let usage = "usage: storage_floor_pg URL DIR";
    let url = args
        .next()
        .and_then(|a| a.into_string().ok())
        .ok_or_else(|| anyhow::anyhow!(usage))?;
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let mut client = Client::connect(&url, NoTls)?;
    client.batch_execute(
        "DROP SCHEMA IF EXISTS storage_floor CASCADE;
         CREATE SCHEMA storage_floor;
         SET search_path = storage_floor;
         CREATE TABLE inbox (sender text, recipient text, control_ref text, sha256 text,
             source_file text, received_at timestamptz, interchange_id bigint,
             PRIMARY KEY (sender, recipient, control_ref));
         CREATE TABLE interchanges (id bigint PRIMARY KEY, sender text, recipient text,
             control_ref text, source_file text, received_at timestamptz, raw bytea);
         CREATE TABLE messages (id bigint PRIMARY KEY, interchange_id bigint, position integer,
             raw_start bigint, raw_end bigint);",
    )?;
    let mut names: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "edi"))
        .collect();
    names.sort();
    let now = std::time::SystemTime::now();
    let mut tx = client.transaction()?;
    let mut unh_counts = Vec::with_capacity(names.len());
    {
        let sink = tx.copy_in(
            "COPY interchanges (id, sender, recipient, control_ref, source_file, received_at, raw)
             FROM STDIN (FORMAT binary)",
        )?;
        let types = [
            Type::INT8,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TIMESTAMPTZ,
            Type::BYTEA,
        ];
        let mut w = BinaryCopyInWriter::new(sink, &types);
        for (id, path) in names.iter().enumerate() {
            let bytes = std::fs::read(path)?;
            let name = path.to_string_lossy().into_owned();
            unh_counts.push(bytes.windows(4).filter(|w| w == b"UNH+").count());
            w.write(&[&(id as i64), &"S", &"R", &name, &name, &now, &bytes])?;
        }
        w.finish()?;
    }
    {
        let sink = tx.copy_in(
            "COPY inbox (sender, recipient, control_ref, sha256, source_file, received_at,
                         interchange_id) FROM STDIN (FORMAT binary)",
        )?;
        let types = [
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TIMESTAMPTZ,
            Type::INT8,
        ];
        let mut w = BinaryCopyInWriter::new(sink, &types);
        for (id, path) in names.iter().enumerate() {
            let name = path.to_string_lossy().into_owned();
            w.write(&[&"S", &"R", &name, &"h", &name, &now, &(id as i64)])?;
        }
        w.finish()?;
    }
    {
        let sink = tx.copy_in(
            "COPY messages (id, interchange_id, position, raw_start, raw_end)
             FROM STDIN (FORMAT binary)",
        )?;
        let types = [Type::INT8, Type::INT8, Type::INT4, Type::INT8, Type::INT8];
        let mut w = BinaryCopyInWriter::new(sink, &types);
        let mut message_id = 0i64;
        for (id, unh) in unh_counts.iter().enumerate() {
            for position in 0..*unh as i32 {
                message_id += 1;
                w.write(&[&message_id, &(id as i64), &position, &0i64, &0i64])?;
            }
        }
        w.finish()?;
    }
    tx.commit()?;
    eprintln!("{} files into schema storage_floor", names.len());
    Ok(())
}
