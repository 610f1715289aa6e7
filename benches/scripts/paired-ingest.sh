#!/usr/bin/env bash
# Compares two builds of edi-inbox on ingest in paired runs: each round ingests the benchmark
# corpus into a fresh database with both builds, one right after the other (alternating which goes
# first), and the median of the rounds' time ratios (NEW/OLD, below 1 = NEW faster) is printed,
# with each build's peak memory, and the median ratio of their CPU time (user and system), which
# a busy machine blurs less than wall time.
#
#   cp target/release/edi-inbox /tmp/new     (and the same at the older commit, to /tmp/old)
#   benches/scripts/paired-ingest.sh /tmp/old /tmp/new [ROUNDS]      (default 7 rounds, 20,000 files)
#
# FILES (default 20000) picks the corpus, generated and cached as benches/scripts/e2e.sh does;
# STANDARD=x12 an ANSI X12 corpus of the same keys (issue 41).
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1; new=$2; rounds=${3:-7}
. benches/scripts/corpus.sh
files=${FILES:-20000}
cargo build --release --quiet --example gen_corpus
if [ "${STANDARD:-edifact}" = edifact ]; then
  corpus=$(bench_corpus "$files")
else
  corpus=$(bench_corpus "$files" 1 "corpus-$files-$STANDARD" "$STANDARD")
fi
find "$corpus" -type f -name 'ic*' -print0 | xargs -0 cat >/dev/null
db="$BENCH_DIR/paired-builds.db"
run() {
  rm -f "$db" "$db-wal" "$db-shm"
  /usr/bin/time -f "%e %M %U %S" -o "$BENCH_DIR/.t" "$1" --db "$db" ingest -q "$corpus" >/dev/null 2>&1 || true
  tail -1 "$BENCH_DIR/.t"
}
ratios=""
cpus=""
for r in $(seq "$rounds"); do
  if (( r % 2 )); then a=$(run "$old"); b=$(run "$new"); else b=$(run "$new"); a=$(run "$old"); fi
  read -r wa ma ua sa <<<"$a"
  read -r wb mb ub sb <<<"$b"
  ratio=$(awk -v a="$wa" -v b="$wb" 'BEGIN {printf "%.3f", b/a}')
  cpu=$(awk -v a="$ua" -v b="$sa" -v c="$ub" -v d="$sb" 'BEGIN {printf "%.3f", (c+d)/(a+b)}')
  echo "round $r: old $wa s ($ma KiB), new $wb s ($mb KiB), new/old $ratio, CPU new/old $cpu"
  ratios="$ratios $ratio"
  cpus="$cpus $cpu"
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n | awk -v files="$files" '{a[NR]=$1}
  END {printf "%s files: new/old time median %.3f (min %.3f, max %.3f, %d rounds)\n",
       files, a[int((NR+1)/2)], a[1], a[NR], NR}'
echo "$cpus" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1}
  END {printf "CPU time new/old median %.3f (min %.3f, max %.3f)\n", a[int((NR+1)/2)], a[1], a[NR]}'
rm -f "$db" "$db-wal" "$db-shm"
