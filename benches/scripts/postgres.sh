#!/usr/bin/env bash
# PostgreSQL benchmark of edi-inbox, in one run, on this machine's server.
#
#   benches/scripts/postgres.sh [FILES] [ROUNDS] [ENTRIES]     (default: 20000 3 1000000)
#
# Needs psql and a server that lets $PG_ADMIN create databases (default: the local one, user
# postgres, trust). Every database it makes is called edi_bench_* and is dropped at the end.
# With the page cache warm, and each step on a freshly created database, it times:
#   1. the storage floor (examples/storage_floor_pg: the same rows written with binary COPY in one
#      transaction, no parsing, hashing or outbox) against ingest of the same FILES files, ROUNDS
#      pairs, alternating which goes first; then ingest again (every interchange a duplicate);
#   2. one host ingesting the FILES files against three hosts (three processes) each ingesting a
#      disjoint third of them at the same time, ROUNDS pairs, alternating;
#   3. ingest of 2,000 files into an empty inbox against one holding ENTRIES old entries,
#      ROUNDS pairs, alternating;
#   4. a purge of those ENTRIES entries while single-file ingest runs follow one another: the
#      slowest run is the longest an ingest waited on the purge.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-20000}
rounds=${2:-3}
entries=${3:-1000000}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432}
export PGOPTIONS="-c client_min_messages=warning"
mkdir -p "$BENCH_DIR"
command -v psql >/dev/null || { echo "needs psql" >&2; exit 2; }
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example storage_floor_pg
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples

admin() { psql "$PG_ADMIN/postgres" -qAtX -v ON_ERROR_STOP=1 "$@"; }
fresh_db() { # name [template]
  admin -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1${2:+ TEMPLATE $2}" >/dev/null
}
cleanup() {
  for d in $(admin -c "SELECT datname FROM pg_database WHERE datname LIKE 'edi_bench_%'"); do
    admin -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null || true
  done
}
trap cleanup EXIT
seconds() { # command... -> wall seconds (ingest exits 3 on the corpus's drift, on purpose)
  /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$@" >/dev/null 2>&1 || true
  tail -1 "$BENCH_DIR/.t"
}
corpus_of() { # n seed -> folder
  local dir="$BENCH_DIR/corpus-$1${2:+-s$2}"
  if [ ! -f "$dir/.done" ]; then
    rm -rf "$dir"; "$ex/gen_corpus" "$dir" "$1" "${2:-1}" 2>/dev/null; touch "$dir/.done"
  fi
  find "$dir" -name '*.edi' -print0 | xargs -0 cat >/dev/null
  echo "$dir"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

corpus=$(corpus_of "$files")
mb=$(find "$corpus" -name '*.edi' -printf '%s\n' | awk '{s+=$1} END {printf "%.1f", s/1e6}')
server=$(admin -c "SHOW server_version")
echo "PostgreSQL $server; $files files, $mb MB; synchronous_commit=$(admin -c 'SHOW synchronous_commit'), fsync=$(admin -c 'SHOW fsync')"

# 1. Storage floor against ingest.
floor() { fresh_db edi_bench_floor; seconds "$ex/storage_floor_pg" "$PG_ADMIN/edi_bench_floor" "$corpus"; }
ingest() { fresh_db edi_bench_e2e; seconds "$bin" --db "$PG_ADMIN/edi_bench_e2e" ingest -q "$corpus"; }
ratios=""
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then f=$(floor); i=$(ingest); else i=$(ingest); f=$(floor); fi
  ratios="$ratios $(ratio "$i" "$f")"
  printf 'round %d: storage floor %6.2f s, ingest %6.2f s (%5.0f files/s), ingest/floor %s\n' \
    "$r" "$f" "$i" "$(awk -v n="$files" -v s="$i" 'BEGIN {print n/s}')" "$(ratio "$i" "$f")"
done
d=$(seconds "$bin" --db "$PG_ADMIN/edi_bench_e2e" ingest -q "$corpus")
echo "ingest/floor median $(echo "$ratios" | median) (target at most 1.5); ingest again, all duplicates: $d s ($(ratio "$d" "$i")x the fresh run)"

# 2. Three hosts on disjoint thirds against one host on the whole.
split="$BENCH_DIR/split-$files"
if [ ! -f "$split/.done" ]; then
  rm -rf "$split"; mkdir -p "$split/1" "$split/2" "$split/3"
  n=0
  for f in "$corpus"/*.edi; do n=$((n + 1)); ln "$f" "$split/$((n % 3 + 1))/"; done
  touch "$split/.done"
fi
one() { fresh_db edi_bench_hosts; seconds "$bin" --db "$PG_ADMIN/edi_bench_hosts" ingest -q "$corpus"; }
three() {
  fresh_db edi_bench_hosts
  local start end
  start=$(date +%s.%N)
  for h in 1 2 3; do "$bin" --db "$PG_ADMIN/edi_bench_hosts" ingest -q "$split/$h" >/dev/null 2>&1 & done
  wait || true
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b-a}'
}
speedups=""
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then o=$(one); t=$(three); else t=$(three); o=$(one); fi
  speedups="$speedups $(ratio "$o" "$t")"
  printf 'round %d: one host %6.2f s, three hosts on disjoint thirds %6.2f s, together %sx one host\n' "$r" "$o" "$t" "$(ratio "$o" "$t")"
done
entries_after=$(psql "$PG_ADMIN/edi_bench_hosts" -qAtX -c "SELECT count(*) FROM edi_inbox.inbox")
echo "three hosts together: median $(echo "$speedups" | median)x the speed of one (target at least 1); $entries_after inbox entries after the last run"

# 3. 1,000,000 entries against none.
small=$(corpus_of 2000 7)
fresh_db edi_bench_template
mkdir -p "$BENCH_DIR/.empty"
"$bin" --db "$PG_ADMIN/edi_bench_template" ingest -q "$BENCH_DIR/.empty" >/dev/null 2>&1 || true
psql "$PG_ADMIN/edi_bench_template" -qAtX -v ON_ERROR_STOP=1 -c "
  INSERT INTO edi_inbox.inbox (sender, recipient, control_ref, sha256, source_file, received_at, interchange_id)
  SELECT 'OLDSENDER' || (i % 50), '4012345000023', 'OLD' || lpad(i::text, 9, '0'), repeat('0', 64),
         'old.edi', now() - interval '400 days', -1
  FROM generate_series(1, $entries) AS i;" -c "VACUUM ANALYZE edi_inbox.inbox" >/dev/null
empty() { fresh_db edi_bench_scale; seconds "$bin" --db "$PG_ADMIN/edi_bench_scale" ingest -q "$small"; }
full() { fresh_db edi_bench_scale edi_bench_template; seconds "$bin" --db "$PG_ADMIN/edi_bench_scale" ingest -q "$small"; }
shares=""
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then e=$(empty); b=$(full); else b=$(full); e=$(empty); fi
  shares="$shares $(awk -v e="$e" -v b="$b" 'BEGIN {printf "%.0f", e/b*100}')"
  printf 'round %d: ingest of 2,000 files: empty inbox %5.2f s, with %d entries %5.2f s (%s%% of the empty-inbox speed)\n' \
    "$r" "$e" "$entries" "$b" "$(awk -v e="$e" -v b="$b" 'BEGIN {printf "%.0f", e/b*100}')"
done
echo "with $entries entries: median $(echo "$shares" | median)% of the empty-inbox speed (target at least 80%)"

# 4. Purge them while single-file ingest runs follow one another.
fresh_db edi_bench_scale edi_bench_template
probe="$BENCH_DIR/pg-probe"; rm -rf "$probe"; mkdir -p "$probe"
n=0; max=0
start=$(date +%s.%N)
"$bin" --db "$PG_ADMIN/edi_bench_scale" purge --days 30 --json >"$BENCH_DIR/pg-purge.json" &
purge=$!
while kill -0 "$purge" 2>/dev/null; do
  n=$((n + 1))
  cp "$small/ic$(printf %07d $((n % 2000)))".edi "$probe/p$n.edi"
  s=$(seconds "$bin" --db "$PG_ADMIN/edi_bench_scale" ingest -q --archive "$probe/done" "$probe/p$n.edi")
  max=$(awk -v a="$max" -v b="$s" 'BEGIN {print (b > a ? b : a)}')
done
wait "$purge" || true
end=$(date +%s.%N)
echo "purge of $entries entries: $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b-a}') s ($(cat "$BENCH_DIR/pg-purge.json")); $n single-file ingest runs during it, the slowest took ${max} s"
