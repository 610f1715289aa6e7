//! Writes large synthetic interchanges for memory checks:
//! `cargo run --release --example big_files -- DIR COUNT MESSAGES`.

use std::path::PathBuf;

#[path = "../tests/it/common/synth.rs"]
#[allow(dead_code)] // each uses a part of it
mod synth;

use synth::{Layout, Synth};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: big_files DIR COUNT MESSAGES";
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let count: usize = args.next().ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let messages: usize = args.next().ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    std::fs::create_dir_all(&dir)?;
    let mut g = Synth::new(7);
    let layout = Layout {
        una: true,
        crlf: false,
        group: false,
    };
    for n in 0..count {
        let data = g.interchange(
            "SENDER",
            "RECIPIENT",
            &format!("BIG{n:04}"),
            messages,
            layout,
        );
        std::fs::write(dir.join(format!("big{n:04}.edi")), &data)?;
        println!("big{n:04}.edi {} bytes", data.len());
    }
    Ok(())
}
