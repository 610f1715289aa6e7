#!/usr/bin/env bash
# End-to-end benchmark of edi-inbox ingest against its floor, in one run, on this machine.
#
#   benches/scripts/e2e.sh [N ...]          (default: 1000 20000)
#
# For each N it generates N files with examples/gen_corpus (seed 1; cached under $BENCH_DIR),
# then times, with the page cache warm for all of them:
#   cat + sha256sum over the files      (the floor of reading and hashing them)
#   storage_floor                       (the same rows inserted with no parsing, one transaction)
#   edi-inbox ingest, fresh database    (durable: synchronous=FULL)
#   edi-inbox ingest again              (every interchange a duplicate)
# and prints seconds, files/s, MB/s, peak RSS (/usr/bin/time) and database size per 1,000
# interchanges, with the ratios the targets in BENCHMARKS.md are stated in.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example storage_floor
bin=target/release/edi-inbox
ex=target/release/examples

timed() { # label command... -> prints "label seconds peak_kb"
  local label=$1; shift
  local t="$BENCH_DIR/.time"
  # ingest exits 3 when the corpus holds drift, as the generated one does on purpose.
  /usr/bin/time -f "%e %M" -o "$t" "$@" >/dev/null 2>&1 || true
  echo "$label $(tail -1 "$t")"
}

[ $# -gt 0 ] || set -- 1000 20000
printf '%-8s %-22s %9s %10s %9s %10s %12s\n' files step seconds files/s MB/s peak_MiB ratio
for n in "$@"; do
  corpus="$BENCH_DIR/corpus-$n"
  if [ ! -f "$corpus/.done" ]; then
    rm -rf "$corpus"
    "$ex/gen_corpus" "$corpus" "$n" 1 2>/dev/null
    touch "$corpus/.done"
  fi
  bytes=$(find "$corpus" -type f -name '*.edi' -printf '%s\n' | awk '{s+=$1} END {print s}')
  mb=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b/1e6}')
  # Warm the page cache so that every step reads from memory alike.
  find "$corpus" -name '*.edi' -print0 | xargs -0 cat >/dev/null
  db="$BENCH_DIR/bench-$n.db"; floor_db="$BENCH_DIR/floor-$n.db"
  rm -f "$db" "$db-wal" "$db-shm"
  read -r _ cat_s _ < <(timed cat sh -c "find '$corpus' -name '*.edi' -print0 | xargs -0 cat")
  read -r _ sha_s _ < <(timed sha sh -c "find '$corpus' -name '*.edi' -print0 | xargs -0 sha256sum")
  read -r _ floor_s floor_kb < <(timed floor "$ex/storage_floor" "$corpus" "$floor_db")
  read -r _ fresh_s fresh_kb < <(timed fresh "$bin" --db "$db" ingest -q "$corpus")
  read -r _ dup_s dup_kb < <(timed dup "$bin" --db "$db" ingest -q "$corpus")
  interchanges=$(sqlite3 "$db" 'SELECT count(*) FROM interchanges' 2>/dev/null || "$bin" --db "$db" stats --json | sed 's/.*"interchanges":\([0-9]*\).*/\1/')
  dbsize=$(( $(stat -c %s "$db") + $(stat -c %s "$db-wal" 2>/dev/null || echo 0) ))
  floor=$(awk -v a="$cat_s" -v b="$sha_s" 'BEGIN {print a+b}')
  row() { # step seconds peak_kb ratio_text
    awk -v n="$n" -v step="$2" -v s="$3" -v kb="$4" -v b="$bytes" -v r="$5" 'BEGIN {
      if (s == 0) s = 0.001;
      printf "%-8s %-22s %9.2f %10.0f %9.1f %10s %12s\n", n, step, s, n/s, b/1e6/s, (kb == "" ? "-" : sprintf("%.1f", kb/1024)), r }'
  }
  row "$n" "cat" "$cat_s" "" ""
  row "$n" "sha256sum" "$sha_s" "" ""
  row "$n" "storage_floor" "$floor_s" "$floor_kb" ""
  row "$n" "ingest (fresh)" "$fresh_s" "$fresh_kb" "$(awk -v a="$fresh_s" -v f="$floor" 'BEGIN {printf "%.2fx cat+sha", a/f}')"
  row "$n" "ingest (all dup)" "$dup_s" "$dup_kb" "$(awk -v a="$dup_s" -v f="$fresh_s" 'BEGIN {printf "%.2fx fresh", a/f}')"
  echo "$n files, $mb MB input, $interchanges interchanges; database $(awk -v d="$dbsize" -v i="$interchanges" -v b="$bytes" 'BEGIN {printf "%.0f bytes per 1,000 interchanges, %.2fx the input size", d/i*1000, d/b}'); ingest/storage_floor $(awk -v a="$fresh_s" -v f="$floor_s" 'BEGIN {printf "%.2f", a/f}')"
done
