#!/usr/bin/env bash
# Compares two builds of edi-inbox on ingest in paired runs: each round ingests the benchmark
# corpus into a fresh database with both builds, one right after the other (alternating which goes
# first), and the median of the rounds' time ratios (NEW/OLD, below 1 = NEW faster) is printed,
# with each build's peak memory.
#
#   cp target/release/edi-inbox /tmp/new     (and the same at the older commit, to /tmp/old)
#   benches/scripts/paired-ingest.sh /tmp/old /tmp/new [ROUNDS]      (default 7 rounds, 20,000 files)
#
# FILES (default 20000) picks the corpus, generated and cached as benches/scripts/e2e.sh does.
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1; new=$2; rounds=${3:-7}
. benches/scripts/corpus.sh
files=${FILES:-20000}
cargo build --release --quiet --example gen_corpus
corpus=$(bench_corpus "$files")
find "$corpus" -name '*.edi' -print0 | xargs -0 cat >/dev/null
db="$BENCH_DIR/paired-builds.db"
run() {
  rm -f "$db" "$db-wal" "$db-shm"
  /usr/bin/time -f "%e %M" -o "$BENCH_DIR/.t" "$1" --db "$db" ingest -q "$corpus" >/dev/null 2>&1 || true
  tail -1 "$BENCH_DIR/.t"
}
ratios=""
for r in $(seq "$rounds"); do
  if (( r % 2 )); then a=$(run "$old"); b=$(run "$new"); else b=$(run "$new"); a=$(run "$old"); fi
  ratio=$(awk -v a="${a% *}" -v b="${b% *}" 'BEGIN {printf "%.3f", b/a}')
  echo "round $r: old ${a% *} s (${a#* } KiB), new ${b% *} s (${b#* } KiB), new/old $ratio"
  ratios="$ratios $ratio"
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n | awk -v files="$files" '{a[NR]=$1}
  END {printf "%s files: new/old time median %.3f (min %.3f, max %.3f, %d rounds)\n",
       files, a[int((NR+1)/2)], a[1], a[NR], NR}'
rm -f "$db" "$db-wal" "$db-shm"
