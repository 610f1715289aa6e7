#!/usr/bin/env bash
# The operator's side effects (--effects, issue 39): ingest of the benchmark corpus with the
# example's two-statement INVOIC mapping against the same ingest without effects, same build,
# in paired rounds (alternating which goes first, each into a fresh inbox), on SQLite and on
# PostgreSQL; and with a minimal mapping (one statement per INVOIC, the document number read
# with one path, no scan of the segments), which is what the pattern itself costs apart from
# reading the message in SQL; and with the mapping the issue describes (the example's invoice
# statement, partner_invoices from BGM, DTM 137 and the MOA after UNS, and a statement counting
# the calls), without the example's line rows. Prints each round and the median ratio
# (with/without, above 1 = slower with).
#
#   benches/scripts/effects.sh [FILES] [ROUNDS]          (default 20000 5)
#
# PostgreSQL: the machine's server ($PG_ADMIN, default postgres://postgres@127.0.0.1:5432),
# databases edi_bench_fx_* made and dropped here; SKIP_PG=1 leaves it out (SKIP_SQLITE=1 the other).
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-20000}
rounds=${2:-5}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432}
export PGOPTIONS="-c client_min_messages=warning"
. benches/scripts/corpus.sh
cargo build --release --quiet --bin edi-inbox --example gen_corpus
bin=$PWD/target/release/edi-inbox
corpus=$(bench_corpus "$files")
find "$corpus" -name '*.edi' -print0 | xargs -0 cat >/dev/null
seconds() { # command... -> wall seconds (the corpus holds drift: ingest exits 3, on purpose)
  /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$@" >/dev/null 2>&1 || true
  tail -1 "$BENCH_DIR/.t"
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "%.3f (min %.3f, max %.3f, %d rounds)", a[int((NR+1)/2)], a[1], a[NR], NR}'; }
# One backend: $1 its name, $2 the mapping, then a function making a fresh inbox and printing
# its --db.
paired() {
  local name=$1 fx=$2 fresh=$3 ratios="" a b db
  for r in $(seq "$rounds"); do
    db=$($fresh); if (( r % 2 )); then
      a=$(seconds "$bin" --db "$db" ingest -q "$corpus")
      db=$($fresh); b=$(seconds "$bin" --db "$db" ingest -q --effects "$fx" "$corpus")
    else
      b=$(seconds "$bin" --db "$db" ingest -q --effects "$fx" "$corpus")
      db=$($fresh); a=$(seconds "$bin" --db "$db" ingest -q "$corpus")
    fi
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b/a}')
    echo "$name round $r: without $a s, with effects $b s, with/without $ratio"
    ratios="$ratios $ratio"
  done
  echo "$name, $files files: with/without effects median $(echo "$ratios" | median)"
}
. benches/scripts/effects-mappings.sh
sqlite_db="$BENCH_DIR/effects-bench.db"
fresh_sqlite() { rm -f "$sqlite_db" "$sqlite_db-wal" "$sqlite_db-shm"; echo "$sqlite_db"; }
if [ -z "${SKIP_SQLITE:-}" ]; then
  paired SQLite examples/effects/sqlite fresh_sqlite
  paired "SQLite (invoice and count)" "$(invoice sqlite)" fresh_sqlite
  paired "SQLite (minimal mapping)" "$(minimal sqlite)" fresh_sqlite
  rm -f "$sqlite_db" "$sqlite_db-wal" "$sqlite_db-shm"
fi
if [ -z "${SKIP_PG:-}" ]; then
  admin() { psql "$PG_ADMIN/postgres" -qAtX -v ON_ERROR_STOP=1 "$@"; }
  n=0
  fresh_pg() {
    n=$((n + 1))
    admin -c "DROP DATABASE IF EXISTS edi_bench_fx_$n WITH (FORCE)" -c "CREATE DATABASE edi_bench_fx_$n" >/dev/null
    echo "$PG_ADMIN/edi_bench_fx_$n"
  }
  cleanup() {
    for d in $(admin -c "SELECT datname FROM pg_database WHERE datname LIKE 'edi_bench_fx_%'"); do
      admin -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null || true
    done
  }
  trap cleanup EXIT
  paired PostgreSQL examples/effects/postgres fresh_pg
  paired "PostgreSQL (invoice and count)" "$(invoice postgres)" fresh_pg
  paired "PostgreSQL (minimal mapping)" "$(minimal postgres)" fresh_pg
fi
