#!/usr/bin/env bash
# Publishing benchmark of edi-inbox, in one run, against this machine's NATS (127.0.0.1:4222).
#
#   benches/scripts/publish.sh [EVENTS] [ROUNDS] [BATCH]     (default: 100000 3 2000)
#
# Makes an SQLite inbox holding at least EVENTS outbox events (ingest of a synthetic corpus), then,
# ROUNDS pairs, alternating which goes first, each on a freshly created stream:
#   - the floor: examples/bare_nats_publish, the same messages (bodies, Nats-Msg-Id and the same
#     CloudEvents headers), batches of BATCH with acknowledgements pipelined, read into memory first,
#     only publishing timed; and, for scale, the bodies with a Nats-Msg-Id alone ("bare");
#   - edi-inbox publish --batch BATCH on a copy of the inbox: claim, send, confirm, mark (whole run).
# Then peak memory (max RSS) of publish for a tenth of the events and for all of them: flat means
# about the same. Streams are called EDI_BENCH_* and deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-100000}
rounds=${2:-3}
batch=${3:-2000}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example bare_nats_publish
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples
stream=EDI_BENCH_$$
trap '"$ex/bare_nats_publish" delete "$stream"' EXIT

# About ten events per file in the synthetic corpus.
files=$(( events / 10 ))
inbox="$BENCH_DIR/publish-$events.db"
if [ ! -f "$inbox.done" ]; then
  rm -rf "$BENCH_DIR/publish-corpus" "$inbox"*
  "$ex/gen_corpus" "$BENCH_DIR/publish-corpus" "$files" 7 2>/dev/null
  "$bin" --db "$inbox" ingest -q "$BENCH_DIR/publish-corpus" >/dev/null || true
  touch "$inbox.done"
fi
have=$(sqlite3 "$inbox" "SELECT count(*) FROM outbox")
echo "inbox: $have outbox events"

floor() { # [--bare]
  "$ex/bare_nats_publish" reset "$stream" "bench.>"
  "$ex/bare_nats_publish" publish "$inbox" bench.bare "$batch" "$@"
}
relay() { # -> seconds
  "$ex/bare_nats_publish" reset "$stream" "bench.>"
  cp "$inbox" "$BENCH_DIR/publish-run.db"
  rm -f "$BENCH_DIR/publish-run.db-wal" "$BENCH_DIR/publish-run.db-shm"
  /usr/bin/time -f %e -o "$BENCH_DIR/.t" "$bin" --db "$BENCH_DIR/publish-run.db" publish -q \
    --batch "$batch" --to nats://127.0.0.1:4222/bench >/dev/null
  tail -1 "$BENCH_DIR/.t"
}
printf '%-6s %10s %10s %10s %8s %8s\n' round bare_s floor_s publish_s ratio vs_bare
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    b=$(floor --bare); f=$(floor); p=$(relay)
  else
    p=$(relay); f=$(floor); b=$(floor --bare)
  fi
  printf '%-6s %10s %10s %10s %8.2f %8.2f\n' "$r" "$b" "$f" "$p" "$(echo "$f / $p" | bc -l)" "$(echo "$b / $p" | bc -l)"
done
echo "(ratio = floor time / publish time: publish's rate as a share of the bare publisher's with the"
echo " same headers; vs_bare: the same against bodies with a Nats-Msg-Id alone)"

peak() { # events -> max RSS in KiB of publishing that many
  "$ex/bare_nats_publish" reset "$stream" "bench.>"
  cp "$inbox" "$BENCH_DIR/publish-run.db"
  rm -f "$BENCH_DIR/publish-run.db-wal" "$BENCH_DIR/publish-run.db-shm"
  sqlite3 "$BENCH_DIR/publish-run.db" "UPDATE outbox SET published_at = '2000-01-01T00:00:00.000Z' WHERE id > (SELECT min(id) + $1 FROM outbox)"
  /usr/bin/time -f %M -o "$BENCH_DIR/.m" "$bin" --db "$BENCH_DIR/publish-run.db" publish -q \
    --batch "$batch" --to nats://127.0.0.1:4222/bench >/dev/null
  tail -1 "$BENCH_DIR/.m"
}
echo "peak memory: $((have / 10)) events $(peak $((have / 10))) KiB, $have events $(peak "$have") KiB"
