#!/usr/bin/env bash
# Variants of `publish --to kafka://` against the bare idempotent producer, alternating in each
# round on the same 99,855 events (tansu on its memory engine, a fresh topic of three partitions
# each time). Each VARIANT is a binary, optionally followed by `:NAME=VALUE ...` environment
# (a librdkafka setting as EDI_INBOX_KAFKA_*, a GLIBC_TUNABLES, ...). Prints per round each
# variant's elapsed, user and system seconds, then the bare producer's time and its CPU.
#
#   EDI_INBOX_TANSU=... benches/scripts/kafka-publish-variants.sh 5 target/release/edi-inbox \
#       "target/release/edi-inbox:EDI_INBOX_KAFKA_LINGER_MS=0"
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:?usage: kafka-publish-variants.sh ROUNDS VARIANT...}
shift
[ $# -gt 0 ] || { echo "name at least one variant" >&2; exit 2; }
events=100000
# shellcheck source=benches/scripts/kafka-common.sh
. benches/scripts/kafka-common.sh
pcorpus=$(corpus "kafka-publish-corpus-$events" $((events / 10)))
rm -f "$BENCH_DIR"/kafka-v.db*
"$bin" --db "$BENCH_DIR/kafka-v.db" ingest -q "$pcorpus" >/dev/null || true
# Everything in the database file itself, so that a copy of the file alone is whole.
sqlite3 "$BENCH_DIR/kafka-v.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
echo "round, then per variant [elapsed user system], then bare=SECONDS [its process's user system]"
for r in $(seq "$rounds"); do
  line="$r"
  for variant in "$@"; do
    cp "$BENCH_DIR/kafka-v.db" "$BENCH_DIR/kafka-v-run.db"
    rm -f "$BENCH_DIR"/kafka-v-run.db-*
    bin=${variant%%:*}
    envs=""
    [ "$bin" != "$variant" ] && envs=${variant#*:}
    t=$(topic 3)
    # shellcheck disable=SC2086 # the variant's settings, split at spaces
    env $envs /usr/bin/time -f '%e %U %S' -o "$BENCH_DIR/.tv" "$bin" --db "$BENCH_DIR/kafka-v-run.db" \
      publish -q --batch 2000 --to "kafka://$servers/$t" >/dev/null
    line="$line [$(tail -1 "$BENCH_DIR/.tv")]"
    "$ex/bare_kafka" delete "$servers" "$t"
  done
  t=$(topic 3)
  b=$(/usr/bin/time -f '%U %S' -o "$BENCH_DIR/.tb" "$ex/bare_kafka" produce "$servers" "$t" "$BENCH_DIR/kafka-v.db")
  "$ex/bare_kafka" delete "$servers" "$t"
  echo "$line bare=$b [$(tail -1 "$BENCH_DIR/.tb")]"
done
