//! Parses files and prints what it found, for profiling the parser outside criterion:
//! `cargo run --release --example parse_file -- FILE...`.

fn main() -> anyhow::Result<()> {
    for path in std::env::args_os().skip(1) {
        let data = std::fs::read(&path)?;
        let start = std::time::Instant::now();
        let mut messages = 0;
        let mut errors = 0;
        for _ in 0..10 {
            for i in edi_inbox::edifact::interchanges(&data) {
                match i {
                    Ok(i) => messages += i.messages.len(),
                    Err(_) => errors += 1,
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{}: {} bytes x10, {messages} messages, {errors} errors, {:.1} MB/s",
            path.to_string_lossy(),
            data.len(),
            data.len() as f64 * 10.0 / secs / 1e6
        );
    }
    Ok(())
}
