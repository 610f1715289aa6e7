//! Parser throughput: one large interchange, and many small ones each parsed on its own.
//!
//! `cargo bench --bench parser`; criterion prints the throughput in MiB/s (README, "Performance").

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use edi_inbox::edifact::interchanges;
#[path = "../tests/it/common/synth.rs"]
#[allow(dead_code)] // each uses a part of it
mod synth;

use synth::parser_bench_inputs;

fn parse_all(data: &[u8]) -> usize {
    interchanges(data)
        .map(|i| i.map(|i| i.messages.len()).unwrap_or(0))
        .sum()
}

fn bench(c: &mut Criterion) {
    let (large, small) = parser_bench_inputs();
    assert_eq!(parse_all(&large), 10_000);
    let small_bytes: usize = small.iter().map(Vec::len).sum();

    let mut group = c.benchmark_group("parser");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(large.len() as u64));
    group.bench_function(format!("large_interchange_{}_bytes", large.len()), |b| {
        b.iter(|| parse_all(std::hint::black_box(&large)))
    });
    group.throughput(Throughput::Bytes(small_bytes as u64));
    group.bench_function(
        format!("{}_small_interchanges_{}_bytes", small.len(), small_bytes),
        |b| {
            b.iter(|| {
                small
                    .iter()
                    .map(|d| parse_all(std::hint::black_box(d)))
                    .sum::<usize>()
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
