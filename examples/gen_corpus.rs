//! Writes a drop folder of synthetic interchanges, deterministic by seed:
//! `cargo run --release --example gen_corpus -- DIR FILES [SEED] [edifact|x12]`.
//!
//! With `x12` every file is an ANSI X12 interchange of 850s instead (00401, the same keys,
//! redeliveries and drifts), for the X12 ingest against the storage floor.
//!
//! About 5% of the files are exact redeliveries of an earlier one (other line breaks) and a few
//! are drifts (same key, other content), as real traffic has.

use std::path::PathBuf;

#[path = "../tests/it/common/synth.rs"]
#[allow(dead_code)] // each uses a part of it
mod synth;

use synth::Synth;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: gen_corpus DIR FILES [SEED] [edifact|x12]";
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let files: usize = args.next().ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let seed: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1);
    let x12 = match args.next().as_deref() {
        None | Some("edifact") => false,
        Some("x12") => true,
        Some(other) => anyhow::bail!("{usage}: `{other}` is not a standard"),
    };
    std::fs::create_dir_all(&dir)?;
    let mut g = Synth::new(seed);
    let (mut bytes, mut redeliveries, mut drifts) = (0usize, 0, 0);
    for n in 0..files {
        let mut key = n;
        let roll = g.below(1000);
        if n > 0 && roll < 50 {
            key = g.below(n as u64) as usize;
            redeliveries += 1;
        } else if n > 0 && roll < 55 {
            key = g.below(n as u64) as usize;
            drifts += 1;
        }
        // The content of a key depends only on the key, so a redelivery is the same payload;
        // a drift changes one message count.
        let mut k = Synth::new(seed ^ (key as u64).wrapping_mul(0x9E37_79B9));
        let mut layout = k.layout();
        let messages = 1 + k.below(20) as usize;
        let sender = format!("SENDER{:02}", key % 17);
        let reference = format!("R{key:08}");
        let messages = if key != n && roll >= 50 {
            messages + 1
        } else {
            messages
        };
        if key != n {
            layout.crlf = !layout.crlf;
        }
        let (data, extension) = if x12 {
            let control = key as u64 + 1;
            let data = k.x12_interchange(&sender, "4012345000023", control, messages, layout.crlf);
            (data, "x12")
        } else {
            let data = k.interchange(&sender, "4012345000023", &reference, messages, layout);
            (data, "edi")
        };
        bytes += data.len();
        std::fs::write(dir.join(format!("ic{n:07}.{extension}")), data)?;
    }
    eprintln!(
        "{files} files, {bytes} bytes, {redeliveries} redeliveries, {drifts} drifts in {}",
        dir.display()
    );
    Ok(())
}
