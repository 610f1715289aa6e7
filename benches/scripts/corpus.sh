# Sourced by the bench scripts: the benchmark corpus, generated once by examples/gen_corpus and
# cached under $BENCH_DIR (default /tmp/edi-inbox-bench).
#
#   corpus=$(bench_corpus FILES [SEED] [NAME])     (seed 1, name corpus-FILES by default)
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
bench_corpus() {
  local files=$1 seed=${2:-1} dir="$BENCH_DIR/${3:-corpus-$1}"
  mkdir -p "$BENCH_DIR"
  if [ ! -f "$dir/.done" ]; then
    rm -rf "$dir"
    target/release/examples/gen_corpus "$dir" "$files" "$seed" 2>/dev/null
    touch "$dir/.done"
  fi
  echo "$dir"
}
