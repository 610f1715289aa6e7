#!/usr/bin/env bash
# Instructions two builds of edi-inbox take to ingest the benchmark corpus into a fresh database,
# counted by valgrind's callgrind: the same count for the same binary and input whatever else the
# machine is doing, so a change of a percent shows where wall times drift by twenty. Under
# valgrind, SHA-256 runs in software (valgrind's CPU has no SHA extensions): read the counts with
# and without `sha2::sha256::compress256`, both printed.
#
#   benches/scripts/instructions.sh /tmp/old /tmp/new      (FILES=2000 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/scripts/corpus.sh
files=${FILES:-2000}
cargo build --release --quiet --example gen_corpus
corpus=$(bench_corpus "$files")
for bin in "$@"; do
  out="$BENCH_DIR/callgrind.$(basename "$bin").out"
  rm -f "$BENCH_DIR/instructions.db"*
  valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bin" --db "$BENCH_DIR/instructions.db" ingest -q "$corpus" >/dev/null 2>"$out.log" || true
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  sha=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
    awk '/sha256.rs:sha2::sha256::compress256/ && !n++ {gsub(",", "", $1); print $1}')
  printf '%s: %s instructions, %s without SHA-256 (%s files)\n' "$bin" "$total" "$((total - ${sha:-0}))" "$files"
done
rm -f "$BENCH_DIR/instructions.db"*
