//! Parser throughput: one large interchange, and many small ones each parsed on its own; and
//! every message of the large one rendered as JSON (`edifact::message_segments` through
//! serde_json, as `inspect --segments --json` renders it) beside the envelope parse of the same
//! bytes.
//!
//! And the ANSI X12 reader on an X12 interchange of the same size as the large EDIFACT one, side
//! by side with the EDIFACT parse (`x12_against_edifact`, issue 41: at least as fast), each
//! directly and through `envelopes::interchanges`, the entry point every intake reads by.
//!
//! `cargo bench --bench parser`; criterion prints the throughput in MiB/s (README, "Performance").
//! Before criterion runs, the rendering's peak heap beside the parsed interchange is measured
//! once and printed (`message_json: peak heap ...`): it must stay the size of one message, not
//! of the file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use edi_inbox::edifact::{Interchange, interchanges, message_segments};
#[path = "../tests/it/common/synth.rs"]
#[allow(dead_code)] // each uses a part of it
mod synth;

use synth::parser_bench_inputs;

/// The system allocator, counting the bytes live and their peak while `COUNTING` is set (only
/// for the one measurement before criterion, so the timed runs pay a relaxed load per
/// allocation and nothing more).
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            if new_size >= layout.size() {
                let grown = new_size - layout.size();
                let live = LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        // SAFETY: as GlobalAlloc::realloc requires, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn parse_all(data: &[u8]) -> usize {
    interchanges(data)
        .map(|i| i.map(|i| i.messages.len()).unwrap_or(0))
        .sum()
}

/// Every message of `i` rendered as JSON into one buffer, emptied between messages as a
/// writer of JSON Lines empties its line: the bytes rendered in all.
fn render_all(i: &Interchange<'_>, line: &mut Vec<u8>) -> usize {
    let mut total = 0;
    for m in &i.messages {
        line.clear();
        let segments = message_segments(i, m).expect("a message the parser accepted");
        serde_json::to_writer(&mut *line, &segments).expect("renders");
        total += line.len();
    }
    total
}

/// Every message of `i` written by `MessageSegments::to_json` (what the side effects bind as
/// `:message`, each segment's place kept): the bytes written in all.
fn write_all(i: &Interchange<'_>) -> usize {
    i.messages
        .iter()
        .map(|m| {
            let segments = message_segments(i, m).expect("a message the parser accepted");
            segments.to_json().text.len()
        })
        .sum()
}

/// The envelope parse of `data`, then every message written by `to_json`.
fn parse_and_write(data: &[u8]) -> usize {
    interchanges(data)
        .filter_map(Result::ok)
        .map(|i| write_all(&i))
        .sum()
}

/// The envelope parse of `data`, then every message rendered: the bytes rendered.
fn parse_and_render(data: &[u8]) -> usize {
    let mut line = Vec::new();
    interchanges(data)
        .filter_map(Result::ok)
        .map(|i| render_all(&i, &mut line))
        .sum()
}

/// Peak heap of rendering every message, beyond the parsed interchange, against the largest
/// message and its JSON; printed once.
fn measure_memory(large: &[u8]) {
    let i = interchanges(large)
        .next()
        .expect("an interchange")
        .expect("a valid one");
    let largest = i.messages.iter().map(|m| m.span.len()).max().unwrap_or(0);
    let mut line = Vec::new();
    let mut largest_json = 0;
    for m in &i.messages {
        line.clear();
        serde_json::to_writer(&mut line, &message_segments(&i, m).unwrap()).unwrap();
        largest_json = largest_json.max(line.len());
    }
    drop(line);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let rendered = render_all(&i, &mut Vec::new());
    COUNTING.store(false, Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed) - before;
    println!(
        "message_json: {} messages, {rendered} bytes of JSON from {} bytes; peak heap beyond the \
         parsed interchange {peak} bytes (the largest message {largest} bytes, its JSON \
         {largest_json} bytes)",
        i.messages.len(),
        large.len()
    );
}

/// An X12 interchange of at least `size` bytes: purchase orders (850) of lines as partners
/// write them, one per line break (as most files hold them), in one group.
fn x12_interchange(size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 4096);
    out.extend_from_slice(
        b"ISA*00*          *00*          *ZZ*ACMERETAIL     *12*5551234567     *261201*0930*^*00501*000000001*0*P*>~\r\n\
          GS*PO*ACMERETAIL*5551234567*20261201*0930*1*X*005010~\r\n",
    );
    let mut sets = 0usize;
    while out.len() < size {
        sets += 1;
        let mut set = vec![
            format!("ST*850*{sets:04}"),
            format!("BEG*00*SA*PO-{sets:07}**20261201"),
            "REF*DP*042".into(),
            "DTM*002*20261215".into(),
            "N1*ST*ACME DC EAST*92*0042".into(),
        ];
        for line in 1..=8 {
            set.push(format!(
                "PO1*{line}*{}*EA*4.25**VN*WIDGET-{line}>BLUE",
                10 * line
            ));
            set.push(format!("PID*F****WIDGET {line}, BLUE"));
        }
        set.push("CTT*8".into());
        // SE01 counts the segments from ST to SE, both included.
        set.push(format!("SE*{}*{sets:04}", set.len() + 1));
        for segment in set {
            out.extend_from_slice(segment.as_bytes());
            out.extend_from_slice(b"~\r\n");
        }
    }
    out.extend_from_slice(format!("GE*{sets}*1~\r\nIEA*1*000000001~\r\n").as_bytes());
    out
}

fn x12_sets(data: &[u8]) -> usize {
    edi_inbox::x12::interchanges(data)
        .map(|i| i.map(|i| i.sets.len()).unwrap_or(0))
        .sum()
}

fn through_envelopes(data: &[u8]) -> usize {
    edi_inbox::envelopes::interchanges(data)
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

    // The same bytes both ways, side by side: the envelope parse alone, and the parse with
    // every message rendered as JSON.
    measure_memory(&large);
    let mut group = c.benchmark_group("message_json");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(large.len() as u64));
    group.bench_function("envelope_parse", |b| {
        b.iter(|| parse_all(std::hint::black_box(&large)))
    });
    group.bench_function("parse_and_render_every_message", |b| {
        b.iter(|| parse_and_render(std::hint::black_box(&large)))
    });
    // The writer the side effects use, beside serde's rendering of the same messages.
    group.bench_function("parse_and_write_every_message_to_json", |b| {
        b.iter(|| parse_and_write(std::hint::black_box(&large)))
    });
    group.finish();
}

/// The X12 reader against the EDIFACT parser on the same number of bytes, in one run.
fn bench_x12(c: &mut Criterion) {
    let (large, _) = parser_bench_inputs();
    let x12 = x12_interchange(large.len());
    let sets = x12_sets(&x12);
    assert!(sets > 1_000, "the X12 interchange reads whole: {sets} sets");
    assert_eq!(through_envelopes(&x12), sets);
    let mut group = c.benchmark_group("x12_against_edifact");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(large.len() as u64));
    group.bench_function(format!("edifact_{}_bytes", large.len()), |b| {
        b.iter(|| parse_all(std::hint::black_box(&large)))
    });
    group.bench_function("edifact_through_envelopes", |b| {
        b.iter(|| through_envelopes(std::hint::black_box(&large)))
    });
    group.throughput(Throughput::Bytes(x12.len() as u64));
    group.bench_function(format!("x12_{}_bytes_{sets}_sets", x12.len()), |b| {
        b.iter(|| x12_sets(std::hint::black_box(&x12)))
    });
    group.bench_function("x12_through_envelopes", |b| {
        b.iter(|| through_envelopes(std::hint::black_box(&x12)))
    });
    group.finish();
}

criterion_group!(benches, bench, bench_x12);
criterion_main!(benches);
