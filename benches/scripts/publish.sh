#!/usr/bin/env bash
# Publishing benchmark of edi-inbox, in one run, against this machine's NATS (127.0.0.1:4222).
#
#   benches/scripts/publish.sh [EVENTS] [ROUNDS]     (default: 100000 3)
#
# Makes an SQLite inbox holding at least EVENTS outbox events (ingest of a synthetic corpus), then,
# ROUNDS pairs, alternating which goes first, each on a freshly created stream:
#   - the floor: examples/bare_nats_publish, the same message bodies with a Nats-Msg-Id, batches of
#     500 with acknowledgements pipelined, read into memory first, only publishing timed;
#   - edi-inbox publish --batch 500 on a copy of the inbox: claim, send, confirm, mark (whole run).
# Then peak memory (max RSS) of publish for a tenth of the events and for all of them: flat means
# about the same. Streams are called EDI_BENCH_* and deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-100000}
rounds=${2:-3}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example bare_nats_publish
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples
stream=EDI_BENCH_$$
trap '"$ex/bare_nats_publish" delete "$stream"' EXIT

# About 1.6 events per file in the synthetic corpus.
files=$(( events * 10 / 15 ))
inbox="$BENCH_DIR/publish-$events.db"
if [ ! -f "$inbox.done" ]; then
  rm -rf "$BENCH_DIR/publish-corpus" "$inbox"*
  "$ex/gen_corpus" "$BENCH_DIR/publish-corpus" "$files" 7 2>/dev/null
  "$bin" --db "$inbox" ingest -q "$BENCH_DIR/publish-corpus" >/dev/null || true
  touch "$inbox.done"
fi
have=$(sqlite3 "$inbox" "SELECT count(*) FROM outbox")
echo "inbox: $have outbox events"

floor() {
  "$ex/bare_nats_publish" reset "$stream" "bench.>"
  "$ex/bare_nats_publish" publish "$inbox" bench.bare 500
}
relay() { # -> seconds
  "$ex/bare_nats_publish" reset "$stream" "bench.>"
  cp "$inbox" "$BENCH_DIR/publish-run.db"
  rm -f "$BENCH_DIR/publish-run.db-wal" "$BENCH_DIR/publish-run.db-shm"
  /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$bin" --db "$BENCH_DIR/publish-run.db" publish -q \
    --batch 500 --to nats://127.0.0.1:4222/bench >/dev/null
  tail -1 "$BENCH_DIR/.t"
}
printf '%-6s %10s %10s %8s\n' round floor_s publish_s ratio
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then f=$(floor); p=$(relay); else p=$(relay); f=$(floor); fi
  printf '%-6s %10s %10s %8.2f\n' "$r" "$f" "$p" "$(echo "$f / $p" | bc -l)"
done
echo "(ratio = floor time / publish time: publish's rate as a share of the bare publisher's)"

peak() { # events -> max RSS in KiB of publishing that many
  "$ex/bare_nats_publish" reset "$stream" "bench.>"
  cp "$inbox" "$BENCH_DIR/publish-run.db"
  rm -f "$BENCH_DIR/publish-run.db-wal" "$BENCH_DIR/publish-run.db-shm"
  sqlite3 "$BENCH_DIR/publish-run.db" "UPDATE outbox SET published_at = '2000-01-01T00:00:00.000Z' WHERE id > (SELECT min(id) + $1 FROM outbox)"
  /usr/bin/time -f %M -o "$BENCH_DIR/.m" "$bin" --db "$BENCH_DIR/publish-run.db" publish -q \
    --batch 500 --to nats://127.0.0.1:4222/bench >/dev/null
  tail -1 "$BENCH_DIR/.m"
}
echo "peak memory: $((have / 10)) events $(peak $((have / 10))) KiB, $have events $(peak "$have") KiB"
