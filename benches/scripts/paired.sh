#!/usr/bin/env bash
# Ingest against the storage floor in paired runs, for a machine whose speed drifts from one
# minute to the next: each round runs the floor and a fresh ingest one right after the other
# (alternating which goes first) and the median of the rounds' time ratios is printed.
#
#   benches/scripts/paired.sh [ROUNDS] [-- INGEST OPTIONS...]     (default 5 rounds, 20,000 files)
#   benches/scripts/paired.sh 5 -- --batch 100
#
# FILES (default 20000) picks the corpus, generated and cached as benches/scripts/e2e.sh does;
# STANDARD=x12 an ANSI X12 corpus of the same keys, redeliveries and drifts (issue 41).
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/scripts/corpus.sh
files=${FILES:-20000}
rounds=${1:-5}
shift || true
[ "${1:-}" = "--" ] && shift
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example storage_floor
bin=target/release/edi-inbox
floor=target/release/examples/storage_floor
standard=${STANDARD:-edifact}
if [ "$standard" = edifact ]; then
  corpus=$(bench_corpus "$files")
else
  corpus=$(bench_corpus "$files" 1 "corpus-$files-$standard" "$standard")
fi
find "$corpus" -type f -name 'ic*' -print0 | xargs -0 cat >/dev/null
db="$BENCH_DIR/paired.db"; floor_db="$BENCH_DIR/paired-floor.db"
seconds() { /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$@" >/dev/null 2>&1 || true; tail -1 "$BENCH_DIR/.t"; }
ingest() { seconds "$bin" --db "$db" ingest -q "$@" "$corpus"; }
ratios=""
for r in $(seq "$rounds"); do
  rm -f "$db" "$db-wal" "$db-shm" "$floor_db" "$floor_db-wal" "$floor_db-shm"
  if (( r % 2 )); then
    f=$(seconds "$floor" "$corpus" "$floor_db"); i=$(ingest "$@")
  else
    i=$(ingest "$@"); f=$(seconds "$floor" "$corpus" "$floor_db")
  fi
  ratio=$(awk -v i="$i" -v f="$f" 'BEGIN {printf "%.3f", i/f}')
  echo "round $r: ingest $i s, floor $f s, ratio $ratio"
  ratios="$ratios $ratio"
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n | awk -v files="$files" -v std="$standard" -v opts="$*" '{a[NR]=$1}
  END {printf "%s %s files, ingest %s: ingest/floor median %.3f (min %.3f, max %.3f, %d rounds)\n",
       files, std, (opts == "" ? "(defaults)" : opts), a[int((NR+1)/2)], a[1], a[NR], NR}'
rm -f "$db" "$db-wal" "$db-shm" "$floor_db" "$floor_db-wal" "$floor_db-shm"
