#!/usr/bin/env bash
# Compares two builds of edi-inbox on the side effects' cost (issue 39): each round runs, for
# both builds one after the other (alternating which goes first), an ingest of the benchmark
# corpus without side effects and one with the mapping the issue describes (the example's
# invoice statement and a count of the calls), each into a fresh SQLite inbox, and prints each
# build's with/without ratio; then each build's median. Where the machine's speed drifts from
# one minute to the next, the ratios of the same round are what compare.
#
#   benches/scripts/paired-effects.sh /tmp/old /tmp/new [ROUNDS]     (default 15 rounds, 20,000 files)
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1; new=$2; rounds=${3:-15}
. benches/scripts/corpus.sh
. benches/scripts/effects-mappings.sh
files=${FILES:-20000}
cargo build --release --quiet --example gen_corpus
corpus=$(bench_corpus "$files")
find "$corpus" -name '*.edi' -print0 | xargs -0 cat >/dev/null
fx=$(invoice sqlite)
db="$BENCH_DIR/paired-effects.db"
seconds() { # command... -> wall seconds (the corpus holds drift: ingest exits 3, on purpose)
  rm -f "$db" "$db-wal" "$db-shm"
  /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$@" >/dev/null 2>&1 || true
  tail -1 "$BENCH_DIR/.t"
}
median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f (min %.3f, max %.3f, %d rounds)", a[int((NR+1)/2)], a[1], a[NR], NR}'; }
declare -A ratios=([old]="" [new]="")
for r in $(seq "$rounds"); do
  order="old new"; (( r % 2 )) || order="new old"
  for which in $order; do
    bin=$old; [ "$which" = new ] && bin=$new
    a=$(seconds "$bin" --db "$db" ingest -q "$corpus")
    b=$(seconds "$bin" --db "$db" ingest -q --effects "$fx" "$corpus")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b/a}')
    echo "round $r $which: without $a s, with $b s, with/without $ratio"
    ratios[$which]="${ratios[$which]} $ratio"
  done
done
rm -f "$db" "$db-wal" "$db-shm"
for which in old new; do
  echo "$which: with/without median $(echo "${ratios[$which]}" | tr ' ' '\n' | grep . | median)"
done
