#!/usr/bin/env bash
# Compares two builds of edi-inbox on publish in paired runs, against this machine's NATS
# (127.0.0.1:4222): each round publishes the same outbox, from a fresh copy of one inbox, into a
# freshly reset stream, with both builds one right after the other (alternating which goes
# first); the median of the rounds' time ratios (NEW/OLD, below 1 = NEW faster) is printed.
#
#   cp target/release/edi-inbox /tmp/new     (and the same at the older commit, to /tmp/old)
#   benches/scripts/paired-publish.sh /tmp/old /tmp/new [ROUNDS] [EVENTS] [BATCH]
#                                            (default 7 rounds, 50,000 events, batches of 2000)
#
# The inbox is ingested by OLD (a newer build would migrate it past what OLD reads) and copied
# once for NEW, migrated there by an ingest of an empty folder, so that neither build's timing includes migrating.
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1; new=$2; rounds=${3:-7}; events=${4:-50000}; batch=${5:-2000}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --example gen_corpus --example bare_nats_publish
ex=$PWD/target/release/examples
stream=EDI_BENCH_PAIRED_$$
trap '"$ex/bare_nats_publish" delete "$stream" >/dev/null 2>&1 || true' EXIT

# About ten events per file in the synthetic corpus.
files=$(( events / 10 ))
base="$BENCH_DIR/paired-publish-$events"
rm -rf "$base".* "$BENCH_DIR/paired-publish-corpus"
"$ex/gen_corpus" "$BENCH_DIR/paired-publish-corpus" "$files" 7 2>/dev/null
"$old" --db "$base.old.db" ingest -q "$BENCH_DIR/paired-publish-corpus" >/dev/null || true
cp "$base.old.db" "$base.new.db"
mkdir -p "$base.empty"
"$new" --db "$base.new.db" ingest -q "$base.empty" >/dev/null
echo "inbox: $(sqlite3 "$base.old.db" "SELECT count(*) FROM outbox") outbox events"

run() { # BIN DB -> "seconds KiB"
  "$ex/bare_nats_publish" reset "$stream" "bench.>" >/dev/null
  cp "$2" "$BENCH_DIR/paired-publish-run.db"
  rm -f "$BENCH_DIR/paired-publish-run.db-wal" "$BENCH_DIR/paired-publish-run.db-shm"
  /usr/bin/time -f "%e %M" -o "$BENCH_DIR/.t" "$1" --db "$BENCH_DIR/paired-publish-run.db" \
    publish -q --batch "$batch" --to nats://127.0.0.1:4222/bench >/dev/null
  tail -1 "$BENCH_DIR/.t"
}
ratios=""
for r in $(seq "$rounds"); do
  if (( r % 2 )); then
    a=$(run "$old" "$base.old.db"); b=$(run "$new" "$base.new.db")
  else
    b=$(run "$new" "$base.new.db"); a=$(run "$old" "$base.old.db")
  fi
  ratio=$(awk -v a="${a% *}" -v b="${b% *}" 'BEGIN {printf "%.3f", b/a}')
  echo "round $r: old ${a% *} s (${a#* } KiB), new ${b% *} s (${b#* } KiB), new/old $ratio"
  ratios="$ratios $ratio"
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n | awk -v events="$events" '{a[NR]=$1}
  END {printf "%s events: new/old time median %.3f (min %.3f, max %.3f, %d rounds)\n",
       events, a[int((NR+1)/2)], a[1], a[NR], NR}'
rm -rf "$base".* "$BENCH_DIR/paired-publish-run.db"* "$BENCH_DIR/paired-publish-corpus"
