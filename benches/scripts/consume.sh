#!/usr/bin/env bash
# Consuming benchmark of edi-inbox, in one run, against this machine's NATS (127.0.0.1:4222).
#
#   benches/scripts/consume.sh [FILES] [ROUNDS] [BATCH]     (default: 20000 3 1000)
#
# A synthetic corpus of FILES files (examples/gen_corpus), then ROUNDS pairs, alternating which
# goes first, each into a fresh SQLite inbox:
#   - ingest: edi-inbox ingest -q of the folder (the files stay in place);
#   - consume: the same files published to a fresh stream, one delivery each with edi-filename
#     (not timed), then edi-inbox consume -q --batch BATCH --until-idle 100ms (timed, the 100 ms
#     of idleness at the end included).
# The ratio is consume's time over ingest's; both inboxes must then hold the same interchanges.
# Peak memory (max RSS) of each is printed for the last round. The stream is EDI_BENCH_C_*, deleted
# at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-20000}
rounds=${2:-3}
batch=${3:-1000}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example bare_nats_publish
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples
stream=EDI_BENCH_C_$$
trap '"$ex/bare_nats_publish" delete "$stream"' EXIT

corpus="$BENCH_DIR/consume-corpus-$files"
if [ ! -f "$corpus.done" ]; then
  rm -rf "$corpus"
  "$ex/gen_corpus" "$corpus" "$files" 7 2>/dev/null
  touch "$corpus.done"
fi

ingest() { # -> seconds
  rm -f "$BENCH_DIR"/consume-i.db*
  /usr/bin/time -f '%e %M' -o "$BENCH_DIR/.ti" "$bin" --db "$BENCH_DIR/consume-i.db" ingest -q \
    "$corpus" >/dev/null || true
  tail -1 "$BENCH_DIR/.ti" | cut -d" " -f1
}
consume() { # -> seconds
  "$ex/bare_nats_publish" reset "$stream" "bench.in"
  "$ex/bare_nats_publish" files "$corpus" bench.in
  rm -f "$BENCH_DIR"/consume-c.db*
  /usr/bin/time -f '%e %M' -o "$BENCH_DIR/.tc" "$bin" --db "$BENCH_DIR/consume-c.db" consume -q \
    --batch "$batch" --until-idle 100ms --from "nats://127.0.0.1:4222/$stream/bench" >/dev/null || true
  tail -1 "$BENCH_DIR/.tc" | cut -d" " -f1
}
printf '%-6s %10s %10s %8s\n' round ingest_s consume_s ratio
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    i=$(ingest); c=$(consume)
  else
    c=$(consume); i=$(ingest)
  fi
  printf '%-6s %10s %10s %8.2f\n' "$r" "$i" "$c" "$(echo "$c / $i" | bc -l)"
done
echo "(ratio = consume time / ingest time, for the same interchanges)"
q="SELECT count(*), count(DISTINCT sha256) FROM interchanges"
echo "interchanges (rows, distinct hashes): ingest $(sqlite3 "$BENCH_DIR/consume-i.db" "$q"), consume $(sqlite3 "$BENCH_DIR/consume-c.db" "$q")"
echo "peak memory: ingest $(tail -1 "$BENCH_DIR/.ti" | cut -d" " -f2) KiB, consume $(tail -1 "$BENCH_DIR/.tc" | cut -d" " -f2) KiB"
