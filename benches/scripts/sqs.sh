#!/usr/bin/env bash
# SQS benchmark of edi-inbox, in one run, against a moto server of its own (moto_server from
# the venv .ci/run makes, or MOTO_SERVER=...; a free port), side by side:
#
#   benches/scripts/sqs.sh [FILES] [ROUNDS]     (default: 1000 3)
#
# - consume vs ingest: FILES synthetic files (examples/gen_corpus); per round, alternating which
#   goes first, each into a fresh SQLite inbox: `ingest -q` of the folder, and `consume -q` of
#   the same files as messages of a fresh queue (loaded first, not timed), `--until-idle 1s`,
#   the idle second taken off.
# - consume vs a bare receive-and-delete loop of the AWS SDK on a queue loaded the same way
#   (examples/bare_sqs read): what moto itself costs.
# - moto's own growth: the time to load the queue (SendMessageBatch, ten a call), per round.
# moto slows down with every message a queue holds (it looks through them all at each call):
# 20,000 would take hours there; FILES of 1,000 and 2,000 show the trend.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-1000}
rounds=${2:-3}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
moto=${MOTO_SERVER:-$(ls "${XDG_CACHE_HOME:-$HOME/.cache}"/edi-inbox-ci/venv-*/bin/moto_server | head -1)}
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example bare_sqs
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint=http://127.0.0.1:$port
"$moto" -H 127.0.0.1 -p "$port" >"$BENCH_DIR/moto.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_EC2_METADATA_DISABLED=true

corpus="$BENCH_DIR/sqs-corpus-$files"
if [ ! -f "$corpus.done" ]; then
  rm -rf "$corpus"
  "$ex/gen_corpus" "$corpus" "$files" 11 2>/dev/null
  touch "$corpus.done"
fi

n=0
queue() { # -> a fresh queue's name, loaded with the corpus; the load's seconds in $BENCH_DIR/.tl
  n=$((n + 1))
  local q="bench_$$_$n"
  "$ex/bare_sqs" create "$endpoint" "$q" >/dev/null
  /usr/bin/time -f '%e' -o "$BENCH_DIR/.tl" "$ex/bare_sqs" files "$endpoint" "$q" "$corpus"
  echo "$q"
}
ingest() { # -> seconds
  rm -f "$BENCH_DIR"/sqs-i.db*
  /usr/bin/time -f '%e %M' -o "$BENCH_DIR/.ti" "$bin" --db "$BENCH_DIR/sqs-i.db" ingest -q \
    "$corpus" >/dev/null || true
  tail -1 "$BENCH_DIR/.ti" | cut -d" " -f1
}
consume() { # QUEUE -> "seconds KiB cpu_seconds", the idle second taken off
  rm -f "$BENCH_DIR"/sqs-c.db*
  /usr/bin/time -f '%e %M %U %S' -o "$BENCH_DIR/.tc" "$bin" --db "$BENCH_DIR/sqs-c.db" consume -q \
    --until-idle 1s --from "$endpoint/123456789012/$1" >/dev/null || true
  read -r s kib u sy < <(tail -1 "$BENCH_DIR/.tc")
  echo "$(echo "$s - 1" | bc -l) $kib $(echo "$u + $sy" | bc -l)"
}
bare() { # QUEUE -> "seconds cpu_seconds"
  /usr/bin/time -f '%U %S' -o "$BENCH_DIR/.tb" "$ex/bare_sqs" read "$endpoint" "$1" "$files" >"$BENCH_DIR/.bs"
  read -r u sy < <(tail -1 "$BENCH_DIR/.tb")
  echo "$(cat "$BENCH_DIR/.bs") $(echo "$u + $sy" | bc -l)"
}

echo "== consume of $files messages (moto) vs ingest of the same $files files, and a bare SDK loop"
# cpu: the client's own CPU seconds (user + system); the rest of its wall time it waits on moto.
printf '%-6s %8s %10s %10s %8s %8s %8s %14s %13s\n' round load_s ingest_s consume_s cpu_s bare_s cpu_s consume/ingest consume/bare
for r in $(seq "$rounds"); do
  q=$(queue)
  load=$(cat "$BENCH_DIR/.tl")
  if [ $((r % 2)) -eq 1 ]; then
    i=$(ingest); read -r c kib ccpu < <(consume "$q")
  else
    read -r c kib ccpu < <(consume "$q"); i=$(ingest)
  fi
  "$ex/bare_sqs" delete "$endpoint" "$q"
  q=$(queue)
  read -r b bcpu < <(bare "$q")
  "$ex/bare_sqs" delete "$endpoint" "$q"
  printf '%-6s %8s %10s %10.2f %8.2f %8s %8.2f %14.2f %13.2f\n' "$r" "$load" "$i" "$c" "$ccpu" "$b" "$bcpu" \
    "$(echo "$c / $i" | bc -l)" "$(echo "$c / $b" | bc -l)"
done
q="SELECT count(*), count(DISTINCT sha256) FROM interchanges"
echo "interchanges (rows, distinct hashes): ingest $(sqlite3 "$BENCH_DIR/sqs-i.db" "$q"), consume $(sqlite3 "$BENCH_DIR/sqs-c.db" "$q")"
echo "peak memory of consume: ${kib} KiB"
