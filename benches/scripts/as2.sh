#!/usr/bin/env bash
# AS2 benchmark of `edi-inbox receive --as2-config`, in one run, over loopback, side by side:
#
#   benches/scripts/as2.sh [MESSAGES] [ROUNDS] [CONCURRENCY]     (default: 1000 3 8)
#
# Needs a Python with pyas2lib 1.4.4 (EDI_INBOX_AS2_PYTHON, default the venv .ci/run makes).
# - MESSAGES synthetic interchanges (examples/gen_corpus, seed 27), each made into a compressed,
#   signed, encrypted AS2 message asking for a signed synchronous MDN once, before any timing,
#   by pyas2lib (benches/as2/prepare.py): every receiver gets the very same request bytes.
# - Per round, in a rotating order, the same requests POSTed over CONCURRENCY keep-alive
#   connections (benches/as2/post.py; timed from the first request to the last answer) to:
#   bare:   pyas2lib's own receiving side, which only reads and answers
#           (benches/as2/bare_receiver.py: Message.parse and its signed MDN, one process per
#           core), the floor;
#   sqlite: `edi-inbox receive -q --as2-config` on a fresh SQLite inbox in $BENCH_DIR;
#   pg:     the same on a fresh PostgreSQL database edi_bench_as2 (where $PG_ADMIN answers).
#   Untimed after each run: every MDN judged by pyas2lib's Mdn.parse and its MIC compared (all
#   must be processed), and for edi-inbox every message counted in the inbox.
# - MDNs per second, edi-inbox/bare per round and the median.
set -euo pipefail
cd "$(dirname "$0")/../.."
messages=${1:-1000}
rounds=${2:-3}
conc=${3:-8}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432}
export PGOPTIONS="-c client_min_messages=warning"
export PYTHONDONTWRITEBYTECODE=1
py=${EDI_INBOX_AS2_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/edi-inbox-ci/venv-pyas2lib-1.4.4/bin/python}
"$py" -c 'import pyas2lib' 2>/dev/null || { echo "needs a Python with pyas2lib 1.4.4 (EDI_INBOX_AS2_PYTHON)" >&2; exit 2; }
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus
bin=$PWD/target/release/edi-inbox
certs=$PWD/tests/fixtures/as4/certs
config="$BENCH_DIR/as2.toml"
printf '[own]\nas2_id = "EDIINBOX"\nkey = "%s"\ncert = "%s"\n\n[[partner]]\nas2_id = "PARTNER"\ncert = "%s"\nrequire_encrypted = true\n' \
  "$certs/receiver.key.pem" "$certs/receiver.cert.pem" "$certs/sender.cert.pem" >"$config"
pgdb=edi_bench_as2
pg=0
if command -v psql >/dev/null && psql "$PG_ADMIN/postgres" -qAtX -c "SELECT 1" >/dev/null 2>&1; then pg=1; fi
admin() { psql "$PG_ADMIN/postgres" -qAtX -v ON_ERROR_STOP=1 "$@"; }
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  if [ "$pg" = 1 ]; then admin -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

corpus="$BENCH_DIR/as4-corpus-$messages"  # the AS4 benchmark's corpus, the same seed
if [ ! -f "$corpus.done" ]; then
  rm -rf "$corpus"
  target/release/examples/gen_corpus "$corpus" "$messages" 27 2>/dev/null
  touch "$corpus.done"
fi
requests="$BENCH_DIR/as2-requests-$messages"
if [ ! -f "$requests.done" ]; then
  rm -rf "$requests"
  "$py" benches/as2/prepare.py --certs "$certs" --out "$requests" "$corpus" >"$requests.log"
  touch "$requests.done"
fi
echo "== AS2: $messages messages, $conc connections, loopback; $(cat "$requests.log") (once, before timing)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# run KIND: sets $per_s; details in $BENCH_DIR/as2-KIND.{log,post}
run() {
  local kind=$1 port db cmd
  port=$(free_port)
  case $kind in
    bare) cmd=("$py" benches/as2/bare_receiver.py --certs "$certs" --listen "127.0.0.1:$port") ;;
    sqlite) rm -f "$BENCH_DIR"/as2.db*; db="$BENCH_DIR/as2.db" ;;
    pg)
      admin -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" -c "CREATE DATABASE $pgdb" >/dev/null
      db="$PG_ADMIN/$pgdb" ;;
  esac
  [ "$kind" = bare ] || cmd=("$bin" --db "$db" receive -q --listen "127.0.0.1:$port" --as2-config "$config")
  "${cmd[@]}" >"$BENCH_DIR/as2-$kind.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  local ok=0
  "$py" benches/as2/post.py --requests "$requests" --certs "$certs" --url "http://127.0.0.1:$port/as2" \
    --concurrency "$conc" >"$BENCH_DIR/as2-$kind.post" 2>>"$BENCH_DIR/as2-$kind.log" || ok=$?
  kill -TERM "$server"
  wait "$server" || true
  server=""
  if [ "$ok" != 0 ]; then
    echo "$kind: not every message was processed: $(cat "$BENCH_DIR/as2-$kind.post")" >&2
    tail -20 "$BENCH_DIR/as2-$kind.log" >&2
    exit 1
  fi
  local stored=$messages
  case $kind in
    sqlite) stored=$(sqlite3 "$db" "SELECT count(*) FROM transport_messages") ;;
    pg) stored=$(psql "$db" -qAtX -c "SELECT count(*) FROM edi_inbox.transport_messages") ;;
  esac
  if [ "$stored" != "$messages" ]; then
    echo "$kind: $stored messages in the inbox, not $messages" >&2
    exit 1
  fi
  per_s=$(field per_second <"$BENCH_DIR/as2-$kind.post")
}

kinds=(bare sqlite)
[ "$pg" = 1 ] && kinds+=(pg)
[ "$pg" = 1 ] || echo "(no PostgreSQL at $PG_ADMIN: its runs skipped)"
printf '%-6s %-18s %8s %9s %8s %12s %8s\n' round order bare/s sqlite/s pg/s sqlite/bare pg/bare
rs="" rp=""
declare -A per
for r in $(seq "$rounds"); do
  n=${#kinds[@]}
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${kinds[$(((i + r - 1) % n))]}"); done
  for k in "${order[@]}"; do
    run "$k"
    per[$k]=$per_s
  done
  rs="$rs $(ratio "${per[sqlite]}" "${per[bare]}")"
  pgr=-
  if [ "$pg" = 1 ]; then pgr=$(ratio "${per[pg]}" "${per[bare]}"); rp="$rp $pgr"; fi
  printf '%-6s %-18s %8s %9s %8s %12s %8s\n' "$r" "$(IFS=,; echo "${order[*]}")" "${per[bare]}" \
    "${per[sqlite]}" "${per[pg]:--}" "$(ratio "${per[sqlite]}" "${per[bare]}")" "$pgr"
done
echo "MDNs/s, edi-inbox over bare: SQLite median $(echo "$rs" | median | xargs printf %.2f) ($rs ), PostgreSQL median $([ "$pg" = 1 ] && echo "$rp" | median | xargs printf %.2f || echo -) (${rp:- -} )"
