#!/usr/bin/env bash
# Compares two builds of edi-inbox on the side effects' cost (issue 39): each round runs, for
# both builds one after the other (alternating which goes first), an ingest of the benchmark
# corpus without side effects and one with the mapping the issue describes (the example's
# invoice statement and a count of the calls), each into a fresh inbox, and prints each
# build's with/without ratio; then each build's median. Where the machine's speed drifts from
# one minute to the next, the ratios of the same round are what compare.
#
#   benches/scripts/paired-effects.sh /tmp/old /tmp/new [ROUNDS]     (default 15 rounds, 20,000 files)
#
# BACKEND=postgres measures on the machine's PostgreSQL ($PG_ADMIN, default
# postgres://postgres@127.0.0.1:5432; a database edi_bench_paired made and dropped for each
# run); MAPPING=example or MAPPING=minimal measures another mapping of effects-mappings.sh
# (example: the shipped examples/effects, its line rows included).
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1; new=$2; rounds=${3:-15}
backend=${BACKEND:-sqlite}
. benches/scripts/corpus.sh
. benches/scripts/effects-mappings.sh
files=${FILES:-20000}
[ -x target/release/examples/gen_corpus ] || cargo build --release --quiet --example gen_corpus
corpus=$(bench_corpus "$files")
find "$corpus" -name '*.edi' -print0 | xargs -0 cat >/dev/null
case ${MAPPING:-invoice} in
  example) fx=$PWD/examples/effects/$backend ;;
  minimal) fx=$(minimal "$backend") ;;
  *) fx=$(invoice "$backend") ;;
esac
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432}
export PGOPTIONS="-c client_min_messages=warning"
admin() { psql "$PG_ADMIN/postgres" -qAtX -v ON_ERROR_STOP=1 "$@"; }
fresh() { # -> the --db of a fresh inbox
  if [ "$backend" = postgres ]; then
    admin -c "DROP DATABASE IF EXISTS edi_bench_paired WITH (FORCE)" -c "CREATE DATABASE edi_bench_paired" >/dev/null
    echo "$PG_ADMIN/edi_bench_paired"
  else
    local db="$BENCH_DIR/paired-effects.db"
    rm -f "$db" "$db-wal" "$db-shm"
    echo "$db"
  fi
}
cleanup() {
  rm -f "$BENCH_DIR/paired-effects.db" "$BENCH_DIR/paired-effects.db-wal" "$BENCH_DIR/paired-effects.db-shm"
  [ "$backend" != postgres ] || admin -c "DROP DATABASE IF EXISTS edi_bench_paired WITH (FORCE)" >/dev/null || true
}
trap cleanup EXIT
seconds() { # command... -> wall seconds (the corpus holds drift: ingest exits 3, on purpose)
  /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$@" >/dev/null 2>&1 || true
  tail -1 "$BENCH_DIR/.t"
}
median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f (min %.3f, max %.3f, %d rounds)", a[int((NR+1)/2)], a[1], a[NR], NR}'; }
declare -A ratios=([old]="" [new]="")
for r in $(seq "$rounds"); do
  order="old new"; (( r % 2 )) || order="new old"
  for which in $order; do
    bin=$old; [ "$which" = new ] && bin=$new
    db=$(fresh); a=$(seconds "$bin" --db "$db" ingest -q "$corpus")
    db=$(fresh); b=$(seconds "$bin" --db "$db" ingest -q --effects "$fx" "$corpus")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b/a}')
    echo "round $r $which: without $a s, with $b s, with/without $ratio"
    ratios[$which]="${ratios[$which]} $ratio"
  done
done
for which in old new; do
  echo "$which: with/without median $(echo "${ratios[$which]}" | tr ' ' '\n' | grep . | median)"
done
