# Sourced by the bench scripts: the benchmark corpus, generated once by examples/gen_corpus and
# cached under $BENCH_DIR (default /tmp/edi-inbox-bench).
#
#   corpus=$(bench_corpus FILES [SEED] [NAME] [STANDARD])
#       (seed 1, name corpus-FILES, standard edifact by default; x12 writes ANSI X12 files)
BENCH_DIR=${BENCH_DIR:-/tmp/edi-inbox-bench}
bench_corpus() {
  local files=$1 seed=${2:-1} dir="$BENCH_DIR/${3:-corpus-$1}" standard=${4:-edifact}
  mkdir -p "$BENCH_DIR"
  if [ ! -f "$dir/.done" ]; then
    rm -rf "$dir"
    target/release/examples/gen_corpus "$dir" "$files" "$seed" "$standard" 2>/dev/null
    touch "$dir/.done"
  fi
  echo "$dir"
}
