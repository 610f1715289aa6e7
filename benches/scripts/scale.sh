#!/usr/bin/env bash
# Scale benchmark: ingest speed with 1,000,000 entries already in the inbox against an empty one,
# and how long ingest runs wait for the lock while a purge deletes 1,000,000 entries.
#
#   benches/scripts/scale.sh [ENTRIES]      (default 1000000; needs the sqlite3 command-line shell)
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
entries=${1:-1000000}
mkdir -p "$BENCH_DIR"
command -v sqlite3 >/dev/null || { echo "needs sqlite3 (Debian package sqlite3)" >&2; exit 2; }
cargo build --release --quiet --bin edi-inbox --example gen_corpus
bin=$PWD/target/release/edi-inbox
corpus="$BENCH_DIR/scale-corpus"
if [ ! -f "$corpus/.done" ]; then
  rm -rf "$corpus"; target/release/examples/gen_corpus "$corpus" 2000 7 2>/dev/null; touch "$corpus/.done"
fi
seconds() { /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$@" >/dev/null 2>&1 || true; tail -1 "$BENCH_DIR/.t"; }

# A database whose inbox holds $entries old entries (received 400 days ago), made with SQL.
big="$BENCH_DIR/big.db"
make_big() {
  rm -f "$big" "$big-wal" "$big-shm"
  "$bin" --db "$big" stats >/dev/null 2>&1 || true
  "$bin" --db "$big" ingest -q "$BENCH_DIR/.empty" >/dev/null 2>&1 || true
  sqlite3 "$big" "PRAGMA journal_mode=WAL; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < $entries)
    INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file, received_at, interchange_id)
    SELECT 'OLDSENDER' || (i % 50), '4012345000023', printf('OLD%09d', i),
           '0000000000000000000000000000000000000000000000000000000000000000', 'old.edi',
           strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-400 days'), -1 FROM n;" >/dev/null
}
mkdir -p "$BENCH_DIR/.empty"

empty="$BENCH_DIR/empty.db"; rm -f "$empty" "$empty-wal" "$empty-shm"
t_empty=$(seconds "$bin" --db "$empty" ingest -q "$corpus")
make_big
t_big=$(seconds "$bin" --db "$big" ingest -q "$corpus")
echo "ingest of 2000 files: empty inbox ${t_empty} s, with $entries entries ${t_big} s ($(awk -v a="$t_empty" -v b="$t_big" 'BEGIN {printf "%.0f%%", a/b*100}') of the empty-inbox speed)"

# Purge them all while single-file ingest runs follow one another; the slowest run is the
# longest any ingest waited for the lock (plus its own work, about 10 ms).
make_big
probe="$BENCH_DIR/probe"; rm -rf "$probe"; mkdir -p "$probe"
n=0
start=$(date +%s.%N)
"$bin" --db "$big" purge --days 30 --json > "$BENCH_DIR/purge.json" &
purge=$!
max=0
while kill -0 "$purge" 2>/dev/null; do
  n=$((n + 1))
  cp "$corpus/ic$(printf %07d $((n % 2000)))".edi "$probe/p$n.edi"
  s=$(seconds "$bin" --db "$big" ingest -q --archive "$probe/done" "$probe/p$n.edi")
  max=$(awk -v a="$max" -v b="$s" 'BEGIN {print (b > a ? b : a)}')
done
wait "$purge"
end=$(date +%s.%N)
echo "purge of $entries entries: $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b-a}') s ($(cat "$BENCH_DIR/purge.json")); $n ingest runs during it, the slowest took ${max} s"
