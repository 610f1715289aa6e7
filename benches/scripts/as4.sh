#!/usr/bin/env bash
# AS4 benchmark of `edi-inbox receive`, in one run, over loopback, side by side:
#
#   benches/scripts/as4.sh [MESSAGES] [ROUNDS] [CONCURRENCY]     (default: 2000 3 8)
#
# Needs a Python with PyPI as4 0.2.0 (EDI_INBOX_AS4_PYTHON, default the venv .ci/run makes).
# - MESSAGES synthetic interchanges (examples/gen_corpus, seed 27: 1 to 20 messages each, about
#   5% exact redeliveries and a few drifts, each still a new AS4 message that gets a receipt),
#   each made into a signed, encrypted, compressed Peppol AS4 message once, before any timing,
#   by the independent sender's own code (benches/as4/prepare.py, through tests/as4/send.py):
#   every receiver gets the very same request bytes.
# - Per round, in a rotating order, the same requests POSTed over CONCURRENCY keep-alive
#   connections (benches/as4/post.py; timed from the first request to the last answer) to:
#   bare:   the as4 library's own receiving side, which only verifies and answers
#           (benches/as4/bare_receiver.py: parse_peppol_message + build_signal, the sender's
#           certificate pinned, one process per core), the floor;
#   sqlite: `edi-inbox receive -q` on a fresh SQLite inbox in $BENCH_DIR;
#   pg:     the same on a fresh PostgreSQL database edi_bench_as4 (where $PG_ADMIN answers;
#           dropped at the end);
#   tmpfs:  the same on a fresh SQLite inbox in /dev/shm, where an fsync costs nothing: what the
#           disk's syncs cost (where the time goes, not a figure to claim).
#   Untimed after each run: every answer judged by the sender's own receive_signal (all must be
#   acknowledged) and, for edi-inbox, every message counted in the inbox.
# - Receipts per second, edi-inbox/bare per round and the median; peak RSS of each receiver.
# - Receiver CPU a message (user+system, the bare receiver's workers included).
# - Where edi-inbox's time goes: CPU seconds per thread of the last round's runs (the deciding
#   thread, the checking threads, the HTTP thread), the PostgreSQL backend's; the speed of one
#   RSA-2048 signature here; with strace, the system calls of the deciding thread in one more
#   PostgreSQL run (its round trips to the server); with perf, a profile of one more SQLite run
#   (perf record, by thread, library and symbol).
set -euo pipefail
cd "$(dirname "$0")/../.."
messages=${1:-2000}
rounds=${2:-3}
conc=${3:-8}
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432}
export PGOPTIONS="-c client_min_messages=warning"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ left in tests/as4 or benches/as4
py=${EDI_INBOX_AS4_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/edi-inbox-ci/venv-as4-0.2.0/bin/python}
"$py" -c 'import as4' 2>/dev/null || { echo "needs a Python with as4 0.2.0 (EDI_INBOX_AS4_PYTHON)" >&2; exit 2; }
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples
certs=$PWD/tests/fixtures/as4/certs
config="$BENCH_DIR/as4.toml"
printf '[own]\nparty_id = "PTE000002"\nkey = "%s"\ncert = "%s"\n\n[[partner]]\nparty_id = "PTE000001"\ncert = "%s"\n' \
  "$certs/receiver.key.pem" "$certs/receiver.cert.pem" "$certs/sender.cert.pem" >"$config"
shm=/dev/shm/edi-bench-as4-$$
pgdb=edi_bench_as4
pg=0
if command -v psql >/dev/null && psql "$PG_ADMIN/postgres" -qAtX -c "SELECT 1" >/dev/null 2>&1; then pg=1; fi
admin() { psql "$PG_ADMIN/postgres" -qAtX -v ON_ERROR_STOP=1 "$@"; }
timer="" server_pid=""
cleanup() { # a receiver still running (an error, ^C): stopped, by its id
  if [ -n "$timer" ] && kill -0 "$timer" 2>/dev/null; then
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    for c in $(pgrep -P "$timer" || true); do kill "$c" 2>/dev/null || true; done
  fi
  rm -f "$shm".db*
  if [ "$pg" = 1 ]; then admin -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

corpus="$BENCH_DIR/as4-corpus-$messages"
if [ ! -f "$corpus.done" ]; then
  rm -rf "$corpus"
  "$ex/gen_corpus" "$corpus" "$messages" 27 2>/dev/null
  touch "$corpus.done"
fi
requests="$BENCH_DIR/as4-requests-$messages"
if [ ! -f "$requests.done" ]; then
  rm -rf "$requests"
  "$py" benches/as4/prepare.py --certs "$certs" --out "$requests" "$corpus" 2>"$requests.log"
  touch "$requests.done"
fi
cat "$requests"/*.bin >/dev/null
mb() { cat "$@" | wc -c | awk '{printf "%.1f", $1/1e6}'; }
echo "== AS4: $messages messages ($(mb "$corpus"/*.edi) MB of EDIFACT in $(mb "$requests"/*.bin) MB of requests), $conc connections, loopback"
echo "sender: $(sed -n 's/^built [0-9]* messages ([^)]*) in \(.*\)$/built them in \1/p' "$requests.log") (once, before timing)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
thread_cpu() { # PID -> "name seconds" per live thread (schedstat: nanoseconds on a CPU), and
  # "(total) seconds" for the whole process, threads that ended included (stat: clock ticks)
  local t s name
  for t in /proc/"$1"/task/*; do
    s=$(cat "$t/schedstat" 2>/dev/null) || continue
    name=$(cat "$t/comm")
    if [ "${t##*/}" = "$1" ]; then name="main (deciding)"; elif [ "$name" = edi-inbox ]; then name="unnamed (WAL checkpoints)"; fi
    echo "$name $(echo "$s" | awk '{printf "%.3f", $1 / 1e9}')"
  done
  s=$(cat /proc/"$1"/stat)
  echo "(total) $(echo "${s##*) }" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($12 + $13) / hz}')"
}
backend_cpu() { # -> CPU ticks of the PostgreSQL backends serving $pgdb
  local pids p s sum=0
  pids=$(admin -c "SELECT pid FROM pg_stat_activity WHERE datname = '$pgdb'")
  for p in $pids; do
    s=$(cat /proc/"$p"/stat 2>/dev/null) || continue
    sum=$((sum + $(echo "${s##*) }" | awk '{print $12 + $13}')))
  done
  echo "$sum"  # clock ticks
}

# run KIND [WRAP...]: sets $per_s, $kib (peak RSS) and $cpu_ms (the receiver's CPU a message, its
# start and stop included); details in $BENCH_DIR/as4-KIND.{log,post,threads}
run() {
  local kind=$1 port db
  shift
  port=$(free_port)
  local listen=(receive -q --listen "127.0.0.1:$port" --as4-config "$config")
  local cmd
  case $kind in
    bare) cmd=("$py" benches/as4/bare_receiver.py --certs "$certs" --listen "127.0.0.1:$port") ;;
    sqlite | perf) rm -f "$BENCH_DIR"/as4.db*; db="$BENCH_DIR/as4.db"; cmd=("$bin" --db "$db" "${listen[@]}") ;;
    tmpfs) rm -f "$shm".db*; db="$shm.db"; cmd=("$bin" --db "$db" "${listen[@]}") ;;
    pg | pgtrace)
      admin -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" -c "CREATE DATABASE $pgdb" >/dev/null
      db="$PG_ADMIN/$pgdb"; cmd=("$bin" --db "$db" "${listen[@]}") ;;
  esac
  "$@" /usr/bin/time -f '%e %M %U %S' -o "$BENCH_DIR/.t-$kind" "${cmd[@]}" >"$BENCH_DIR/as4-$kind.log" 2>&1 &
  timer=$!
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  # The receiver under time (under perf for the profile): the process that listens.
  local server tracer=""
  server=$(pgrep -P "$timer" | head -1 || true)
  if [ "$kind" = perf ]; then server=$(pgrep -P "$server" | head -1 || true); fi
  server_pid=$server
  if [ "$kind" = pgtrace ]; then
    strace -c -o "$BENCH_DIR/as4-pgtrace.strace" -p "$server" 2>/dev/null &
    tracer=$!
    sleep 0.5
  fi
  local pg0=0
  if [ "$kind" = pg ] || [ "$kind" = pgtrace ]; then pg0=$(backend_cpu); fi
  local ok=0
  "$py" benches/as4/post.py --requests "$requests" --certs "$certs" --url "http://127.0.0.1:$port/as4" \
    --concurrency "$conc" >"$BENCH_DIR/as4-$kind.post" 2>>"$BENCH_DIR/as4-$kind.log" || ok=$?
  if [ -n "$tracer" ]; then kill -INT "$tracer"; wait "$tracer" || true; fi
  if [ "$kind" != bare ]; then
    thread_cpu "$server" >"$BENCH_DIR/as4-$kind.threads"
    if [ "$kind" = pg ] || [ "$kind" = pgtrace ]; then
      echo "(postgres backend) $(awk -v a="$pg0" -v b="$(backend_cpu)" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", (b - a) / hz}')" \
        >>"$BENCH_DIR/as4-$kind.threads"
    fi
  fi
  kill -TERM "$server"
  wait "$timer" || true
  timer=""
  if [ "$ok" != 0 ]; then
    echo "$kind: not every message was acknowledged: $(cat "$BENCH_DIR/as4-$kind.post")" >&2
    tail -20 "$BENCH_DIR/as4-$kind.log" >&2
    exit 1
  fi
  local stored=$messages
  case $kind in
    sqlite | perf | tmpfs) stored=$(sqlite3 "$db" "SELECT count(*) FROM transport_messages") ;;
    pg | pgtrace) stored=$(psql "$db" -qAtX -c "SELECT count(*) FROM edi_inbox.transport_messages") ;;
  esac
  if [ "$stored" != "$messages" ]; then
    echo "$kind: $stored messages in the inbox, not $messages" >&2
    exit 1
  fi
  per_s=$(field per_second <"$BENCH_DIR/as4-$kind.post")
  kib=$(tail -1 "$BENCH_DIR/.t-$kind" | cut -d' ' -f2)
  cpu_ms=$(tail -1 "$BENCH_DIR/.t-$kind" | awk -v n="$messages" '{printf "%.2f", ($3 + $4) * 1000 / n}')
}

kinds=(bare sqlite)
[ "$pg" = 1 ] && kinds+=(pg)
kinds+=(tmpfs)
[ "$pg" = 1 ] || echo "(no PostgreSQL at $PG_ADMIN: its runs skipped)"
printf '%-6s %-24s %8s %9s %8s %9s %12s %8s %13s\n' round order bare/s sqlite/s pg/s tmpfs/s sqlite/bare pg/bare sqlite/tmpfs
rs="" rp=""
declare -A rss per cpu
for r in $(seq "$rounds"); do
  n=${#kinds[@]}
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${kinds[$(((i + r - 1) % n))]}"); done
  for k in "${order[@]}"; do
    run "$k"
    per[$k]=$per_s
    rss[$k]=$kib
    cpu[$k]=$cpu_ms
  done
  rs="$rs $(ratio "${per[sqlite]}" "${per[bare]}")"
  pgr=-
  if [ "$pg" = 1 ]; then pgr=$(ratio "${per[pg]}" "${per[bare]}"); rp="$rp $pgr"; fi
  printf '%-6s %-24s %8s %9s %8s %9s %12s %8s %13s\n' "$r" "$(IFS=,; echo "${order[*]}")" "${per[bare]}" \
    "${per[sqlite]}" "${per[pg]:--}" "${per[tmpfs]}" "$(ratio "${per[sqlite]}" "${per[bare]}")" "$pgr" \
    "$(ratio "${per[sqlite]}" "${per[tmpfs]}")"
done
echo "receipts/s, edi-inbox over bare: SQLite median $(echo "$rs" | median | xargs printf %.2f) ($rs ), PostgreSQL median $([ "$pg" = 1 ] && echo "$rp" | median | xargs printf %.2f || echo -) (${rp:- -} )"
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k/1024}'; }
echo "peak RSS (last round): bare $(mib "${rss[bare]}") MiB (its largest worker), sqlite $(mib "${rss[sqlite]}") MiB, pg $([ "$pg" = 1 ] && mib "${rss[pg]}" || echo -) MiB, tmpfs $(mib "${rss[tmpfs]}") MiB"
echo "receiver CPU a message (last round, user+system): bare ${cpu[bare]} ms (all workers), sqlite ${cpu[sqlite]} ms, pg ${cpu[pg]:--} ms (edi-inbox only), tmpfs ${cpu[tmpfs]} ms"
for k in "${kinds[@]}"; do
  echo "$k: $(cat "$BENCH_DIR/as4-$k.post")"
done
for k in sqlite pg tmpfs; do
  [ -f "$BENCH_DIR/as4-$k.log" ] && [ "$k" != pg -o "$pg" = 1 ] && echo "edi-inbox $k: $(grep 'receipts (' "$BENCH_DIR/as4-$k.log" | tail -1)"
done

echo "== where edi-inbox's time goes: CPU per thread in the last round's runs, against each run's wall time"
printf '  %-6s %-26s %7s %8s %9s %11s\n' run thread threads cpu_s "% of wall" "ms/message"
for k in sqlite pg tmpfs; do
  [ "$k" = pg ] && [ "$pg" = 0 ] && continue
  wall=$(field seconds <"$BENCH_DIR/as4-$k.post")
  awk -v wall="$wall" -v n="$messages" -v run="$k" -v client="$(field client_cpu_s <"$BENCH_DIR/as4-$k.post")" '
    function row(name, count, secs) {
      printf "  %-6s %-26s %7s %8.2f %8.1f%% %11.2f\n", run, name, count, secs, 100 * secs / wall, 1000 * secs / n
    }
    {name = $1; for (i = 2; i < NF; i++) name = name " " $i; t[name] += $NF; c[name]++; if (name !~ /^\(/) live += $NF}
    END {
      split("main (deciding)|tokio-rt-worker|as4-http|unnamed (WAL checkpoints)", order, "|")
      for (i = 1; i <= 4; i++) if (order[i] in t) row(order[i], c[order[i]], t[order[i]])
      for (k in t) if (k !~ /^\(/ && k != order[1] && k != order[2] && k != order[3] && k != order[4]) row(k, c[k], t[k])
      # The total is in clock ticks (10 ms): a difference within that is rounding.
      gone = t["(total)"] - live
      if (gone < 0.02) gone = 0
      row("threads that ended", "", gone)
      row("edi-inbox in all", "", live + gone)
      if ("(postgres backend)" in t) row("postgres backend", "", t["(postgres backend)"])
      row("client (post.py)", "", client)
    }' "$BENCH_DIR/as4-$k.threads"
  echo "  $k: ${wall} s wall; on 2 cores that is $(awk -v w="$wall" 'BEGIN {printf "%.2f", 2 * w}') CPU-seconds available"
done
if command -v openssl >/dev/null; then
  echo "one RSA-2048 private-key operation here (openssl speed): $(openssl speed -seconds 1 -mr rsa2048 2>/dev/null |
    awk -F: '/^\+F2:/ {printf "%.2f ms", 1000 / $4; exit}') (each side makes two a message: the key's unwrapping and the receipt's signature)"
fi

if [ "$pg" = 1 ] && command -v strace >/dev/null; then
  echo "== PostgreSQL: one more run with strace -c on the deciding thread (its system calls; strace slows it)"
  run pgtrace
  echo "under strace: $per_s receipts/s; a message: $(awk -v n="$messages" '
    $NF ~ /^(sendto|recvfrom|write|epoll_wait)$/ {printf "%s%.1f %s", sep, $4 / n, $NF; sep = ", "}' "$BENCH_DIR/as4-pgtrace.strace")"
  echo "(the postgres client sends a statement and waits for its answer: each sendto is about one round trip of a message's transaction)"
fi

if command -v perf >/dev/null; then
  echo "== a profile of one more SQLite run (perf record -F 999, on-CPU samples only; time waiting on fsync is not in it)"
  run perf perf record -q -F 999 -o "$BENCH_DIR/as4.perf.data" --
  echo "under perf: $per_s receipts/s"
  # By thread (the deciding thread by its id), library and symbol: OpenSSL's symbols are not in
  # its build, so its share is one line; each thread's top symbols below its libraries.
  perf report -i "$BENCH_DIR/as4.perf.data" --no-children --stdio -q --sort pid,dso,sym 2>/dev/null |
    awk -v main="$server_pid" '
      $1 ~ /%$/ && NF >= 5 {
        pct = $1; sub("%", "", pct); split($2, p, ":")
        who = p[1] == main ? "main (deciding)" : p[2]
        if (who == "edi-inbox") who = "unnamed (WAL checkpoints)"
        dso = $3; sym = $5; for (i = 6; i <= NF; i++) sym = sym " " $i
        if (dso ~ /libcrypto/) sym = "(OpenSSL: RSA, AES-GCM, digests)"
        t[who] += pct; d[who "|" dso] += pct; v[who "|" dso "|" sym] += pct
      }
      END {
        rank["main (deciding)"] = 1; rank["tokio-rt-worker"] = 2; rank["as4-http"] = 3
        for (w in t) printf "%d|0|%09.4f|%s: %.1f%% of all samples\n", (w in rank ? rank[w] : 4), t[w], w, t[w]
        for (k in d) { split(k, a, "|"); printf "%d|1|%09.4f|    %5.1f%%  %s\n", (a[1] in rank ? rank[a[1]] : 4), d[k], d[k], a[2] }
        for (k in v) { split(k, a, "|"); printf "%d|2|%09.4f|    %5.1f%%      %s  %s\n", (a[1] in rank ? rank[a[1]] : 4), v[k], v[k], a[2], a[3] }
      }' | sort -t'|' -k1,1n -k2,2n -k3,3r |
    awk -F'|' '$3 + 0 < 0.3 {next} $2 == 0 {print $4; n = 0; next} $2 == 1 {print $4; next} n++ < 12 {print $4}'
fi
