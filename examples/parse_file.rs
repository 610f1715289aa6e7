//! Parses files and prints what it found, for profiling the parser outside criterion:
//! `cargo run --release --example parse_file -- FILE...`. With no file, it parses the two inputs
//! of `benches/parser.rs` (the large interchange, then the small ones as one file), which is how
//! BENCHMARKS.md compares two builds in paired runs.

#[path = "../tests/it/common/synth.rs"]
#[allow(dead_code)] // each uses a part of it
mod synth;

fn main() -> anyhow::Result<()> {
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    for path in std::env::args_os().skip(1) {
        let data = std::fs::read(&path)?;
        inputs.push((path.to_string_lossy().into_owned(), data));
    }
    if inputs.is_empty() {
        let (large, small) = synth::parser_bench_inputs();
        inputs.push(("large interchange".into(), large));
        inputs.push(("small interchanges".into(), small.concat()));
    }
    for (name, data) in &inputs {
        let start = std::time::Instant::now();
        let mut messages = 0;
        let mut errors = 0;
        for _ in 0..10 {
            for i in edi_inbox::edifact::interchanges(data) {
                match i {
                    Ok(i) => messages += i.messages.len(),
                    Err(_) => errors += 1,
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name}: {} bytes x10, {messages} messages, {errors} errors, {:.1} MB/s",
            data.len(),
            data.len() as f64 * 10.0 / secs / 1e6
        );
    }
    Ok(())
}
