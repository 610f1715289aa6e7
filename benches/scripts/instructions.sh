#!/usr/bin/env bash
# Instructions two builds of edi-inbox take to ingest the benchmark corpus into a fresh database,
# counted by valgrind's callgrind: the same count for the same binary and input whatever else the
# machine is doing, so a change of a percent shows where wall times drift by twenty. Under
# valgrind, SHA-256 runs in software (valgrind's CPU has no SHA extensions): read the counts with
# and without `sha2::sha256::compress256`, both printed.
#
#   benches/scripts/instructions.sh /tmp/old /tmp/new      (FILES=2000 by default)
#
# EFFECTS=DIR ingests with `--effects DIR` (issue 39); STANDARD=x12 an ANSI X12 corpus of the same
# keys (issue 41). Each thread's count is printed too, the
# deciding thread first: it is the one the run waits on.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/scripts/corpus.sh
files=${FILES:-2000}
cargo build --release --quiet --example gen_corpus
if [ "${STANDARD:-edifact}" = edifact ]; then
  corpus=$(bench_corpus "$files")
else
  corpus=$(bench_corpus "$files" 1 "corpus-$files-$STANDARD" "$STANDARD")
fi
for bin in "$@"; do
  out="$BENCH_DIR/callgrind.$(basename "$bin").out"
  rm -f "$BENCH_DIR/instructions.db"*
  rm -f "$out" "$out"-*
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out" \
    "$bin" --db "$BENCH_DIR/instructions.db" ingest -q ${EFFECTS:+--effects "$EFFECTS"} "$corpus" \
    >/dev/null 2>"$out.log" || true
  threads=$(ls "$out"-* | sort -t- -k2 -n)
  total=0 sha=0 each=""
  for t in $threads; do
    n=$(awk '/^totals:/ {print $2}' "$t")
    s=$(callgrind_annotate --inclusive=yes "$t" 2>/dev/null |
      awk '/sha256.rs:sha2::sha256::compress256/ && !n++ {gsub(",", "", $1); print $1}')
    total=$((total + n)) sha=$((sha + ${s:-0})) each="$each $n"
  done
  printf '%s: %s instructions, %s without SHA-256 (%s files); by thread:%s\n' \
    "$bin" "$total" "$((total - sha))" "$files" "$each"
done
rm -f "$BENCH_DIR/instructions.db"*
