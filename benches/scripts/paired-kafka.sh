#!/usr/bin/env bash
# Compares two builds of edi-inbox on Kafka in paired runs, against a tansu broker of its own
# (EDI_INBOX_TANSU, as .ci/run installs it): per round, alternating which goes first,
# - consume: FILES synthetic files as records of a fresh one-partition topic (loaded first, not
#   timed), each build consuming all of it into a fresh SQLite inbox (`--until-idle 1s`, the
#   partition by hand, the idle second taken off);
# - publish: the same outbox of about EVENTS events from a fresh copy of one inbox into a fresh
#   topic of three partitions.
# The median of the rounds' time ratios (NEW/OLD, below 1 = NEW faster) is printed for each.
#
#   benches/scripts/paired-kafka.sh /tmp/old /tmp/new [ROUNDS] [FILES] [EVENTS]
#                                            (default 5 rounds, 20,000 files, 50,000 events)
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1; new=$2; rounds=${3:-5}; files=${4:-20000}; events=${5:-50000}
# shellcheck source=benches/scripts/kafka-common.sh
. benches/scripts/kafka-common.sh
corpus=$(corpus "kafka-corpus-$files" "$files")
pcorpus=$(corpus "kafka-publish-corpus-$events" $((events / 10)))
# The outbox is made by OLD (a newer build would migrate it past what OLD reads); NEW migrates
# its copy by an ingest of an empty folder first, so that no timing includes migrating.
rm -rf "$BENCH_DIR"/paired-kafka.* && mkdir -p "$BENCH_DIR/paired-kafka.empty"
"$old" --db "$BENCH_DIR/paired-kafka.old.db" ingest -q "$pcorpus" >/dev/null || true
sqlite3 "$BENCH_DIR/paired-kafka.old.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp "$BENCH_DIR/paired-kafka.old.db" "$BENCH_DIR/paired-kafka.new.db"
"$new" --db "$BENCH_DIR/paired-kafka.new.db" ingest -q "$BENCH_DIR/paired-kafka.empty" >/dev/null || true
sqlite3 "$BENCH_DIR/paired-kafka.new.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null

consume() { # BUILD TOPIC GROUP -> seconds, the idle second taken off
  rm -f "$BENCH_DIR"/paired-kafka-c.db*
  # A group of each run's own: the broker keeps the offsets a group committed, where a consumer
  # with a fresh inbox would start.
  /usr/bin/time -f '%e' -o "$BENCH_DIR/.tc" "$1" --db "$BENCH_DIR/paired-kafka-c.db" consume -q \
    --until-idle 1s --from "kafka://$servers/$2?group=$3&partitions=0" >/dev/null || true
  echo "$(tail -1 "$BENCH_DIR/.tc") - 1" | bc -l
}
publish() { # BUILD WHICH TOPIC -> seconds
  cp "$BENCH_DIR/paired-kafka.$2.db" "$BENCH_DIR/paired-kafka-run.db"
  rm -f "$BENCH_DIR"/paired-kafka-run.db-*
  local t=$3
  /usr/bin/time -f '%e' -o "$BENCH_DIR/.tp" "$1" --db "$BENCH_DIR/paired-kafka-run.db" publish -q \
    --batch 2000 --to "kafka://$servers/$t" >/dev/null
  "$ex/bare_kafka" delete "$servers" "$t"
  tail -1 "$BENCH_DIR/.tp"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

: >"$BENCH_DIR/.rc"; : >"$BENCH_DIR/.rp"
for r in $(seq "$rounds"); do
  # `topic` names a topic by a count its subshell cannot carry back: counted here.
  t=$(topic 1); n=$((n + 1)); t_old=$(topic 3); n=$((n + 1)); t_new=$(topic 3); n=$((n + 1))
  "$ex/bare_kafka" files "$servers" "$t" "$corpus"
  if [ $((r % 2)) -eq 1 ]; then
    co=$(consume "$old" "$t" "old$r"); cn=$(consume "$new" "$t" "new$r")
    po=$(publish "$old" old "$t_old"); pn=$(publish "$new" new "$t_new")
  else
    cn=$(consume "$new" "$t" "new$r"); co=$(consume "$old" "$t" "old$r")
    pn=$(publish "$new" new "$t_new"); po=$(publish "$old" old "$t_old")
  fi
  "$ex/bare_kafka" delete "$servers" "$t"
  rc=$(echo "$cn / $co" | bc -l); rp=$(echo "$pn / $po" | bc -l)
  echo "$rc" >>"$BENCH_DIR/.rc"; echo "$rp" >>"$BENCH_DIR/.rp"
  printf 'round %s: consume old %.2f s new %.2f s (%.3f); publish old %s s new %s s (%.3f)\n' \
    "$r" "$co" "$cn" "$rc" "$po" "$pn" "$rp"
done
printf 'consume %s records: new/old median %.3f; publish: new/old median %.3f (%s rounds)\n' \
  "$files" "$(median <"$BENCH_DIR/.rc")" "$(median <"$BENCH_DIR/.rp")" "$rounds"
