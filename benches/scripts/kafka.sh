#!/usr/bin/env bash
# Kafka benchmark of edi-inbox, in one run, against a tansu broker of its own (the binary at
# EDI_INBOX_TANSU, as .ci/run installs it; memory engine, a free port), side by side:
#
#   benches/scripts/kafka.sh [FILES] [ROUNDS] [EVENTS]     (default: 20000 3 100000)
#
# - consume vs ingest: FILES synthetic files (examples/gen_corpus); per round, alternating which
#   goes first, each into a fresh SQLite inbox: `ingest -q` of the folder, and `consume -q` of the
#   same files as records of a fresh one-partition topic (loaded first, not timed), its partition
#   by hand (a group's first assignment waits on tansu's session timeout, which is not
#   edi-inbox's time), `--until-idle 1s`, the 1 s of idleness at the end taken off.
# - consume vs a bare librdkafka consumer that reads the same records and does nothing
#   (examples/bare_kafka read).
# - peak memory (max RSS) of consume for FILES records and for ten times as many (the same
#   files sent ten times over: the rest are decided as duplicates).
# - publish vs a bare idempotent producer of the same records, headers and keys
#   (examples/bare_kafka produce): EVENTS events (about ten per file), each into a fresh topic.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-20000}
rounds=${2:-3}
events=${3:-100000}
# shellcheck source=benches/scripts/kafka-common.sh
. benches/scripts/kafka-common.sh
corpus=$(corpus "kafka-corpus-$files" "$files")

ingest() { # -> seconds
  rm -f "$BENCH_DIR"/kafka-i.db*
  /usr/bin/time -f '%e %M' -o "$BENCH_DIR/.ti" "$bin" --db "$BENCH_DIR/kafka-i.db" ingest -q \
    "$corpus" >/dev/null || true
  tail -1 "$BENCH_DIR/.ti" | cut -d" " -f1
}
consume() { # TOPIC -> "seconds KiB", the idle second taken off
  rm -f "$BENCH_DIR"/kafka-c.db*
  /usr/bin/time -f '%e %M' -o "$BENCH_DIR/.tc" "$bin" --db "$BENCH_DIR/kafka-c.db" consume -q \
    --until-idle 1s --from "kafka://$servers/$1?group=bench&partitions=0" >/dev/null || true
  read -r s kib < <(tail -1 "$BENCH_DIR/.tc")
  echo "$(echo "$s - 1" | bc -l) $kib"
}

echo "== consume of $files records vs ingest of the same $files files, and a bare consumer"
printf '%-6s %10s %10s %10s %10s %10s\n' round ingest_s consume_s bare_s consume/ingest consume/bare
for r in $(seq "$rounds"); do
  t=$(topic 1)
  "$ex/bare_kafka" files "$servers" "$t" "$corpus"
  if [ $((r % 2)) -eq 1 ]; then
    i=$(ingest); read -r c kib < <(consume "$t")
  else
    read -r c kib < <(consume "$t"); i=$(ingest)
  fi
  b=$("$ex/bare_kafka" read "$servers" "$t" "$files" 2>/dev/null)
  "$ex/bare_kafka" delete "$servers" "$t"
  printf '%-6s %10s %10.2f %10s %10.2f %10.2f\n' "$r" "$i" "$c" "$b" \
    "$(echo "$c / $i" | bc -l)" "$(echo "$c / $b" | bc -l)"
done
q="SELECT count(*), count(DISTINCT sha256) FROM interchanges"
echo "interchanges (rows, distinct hashes): ingest $(sqlite3 "$BENCH_DIR/kafka-i.db" "$q"), consume $(sqlite3 "$BENCH_DIR/kafka-c.db" "$q")"

echo "== peak memory of consume"
echo "records=$files max_rss_kib=$kib"
t=$(topic 1)
"$ex/bare_kafka" files "$servers" "$t" "$corpus" 10
read -r c kib < <(consume "$t")
"$ex/bare_kafka" delete "$servers" "$t"
echo "records=$((files * 10)) max_rss_kib=$kib seconds=$c"

echo "== publish of about $events events vs a bare idempotent producer"
pcorpus=$(corpus "kafka-publish-corpus-$events" $((events / 10)))
rm -f "$BENCH_DIR"/kafka-p.db*
"$bin" --db "$BENCH_DIR/kafka-p.db" ingest -q "$pcorpus" >/dev/null || true
# Everything in the database file itself, so that a copy of the file alone is whole.
sqlite3 "$BENCH_DIR/kafka-p.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
echo "outbox: $(sqlite3 "$BENCH_DIR/kafka-p.db" "SELECT count(*) FROM outbox") events"
printf '%-6s %10s %10s %14s\n' round publish_s bare_s bare/publish
for r in $(seq "$rounds"); do
  cp "$BENCH_DIR/kafka-p.db" "$BENCH_DIR/kafka-p-run.db"
  rm -f "$BENCH_DIR"/kafka-p-run.db-*
  t=$(topic 3)
  /usr/bin/time -f '%e' -o "$BENCH_DIR/.tp" "$bin" --db "$BENCH_DIR/kafka-p-run.db" publish -q \
    --batch 2000 --to "kafka://$servers/$t" >/dev/null
  p=$(tail -1 "$BENCH_DIR/.tp")
  "$ex/bare_kafka" delete "$servers" "$t"
  t=$(topic 3)
  b=$("$ex/bare_kafka" produce "$servers" "$t" "$BENCH_DIR/kafka-p.db")
  "$ex/bare_kafka" delete "$servers" "$t"
  printf '%-6s %10s %10s %14.2f\n' "$r" "$p" "$b" "$(echo "$b / $p" | bc -l)"
done
echo "(bare/publish = the bare producer's time over publish's: publish's throughput as a share of the bare producer's)"
