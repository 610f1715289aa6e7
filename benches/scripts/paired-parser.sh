#!/usr/bin/env bash
# Compares two builds of the parser in paired runs: each round runs both builds' parse_file
# example (alternating which goes first) on the parser benchmark's inputs, and the median of the
# rounds' speed ratios (NEW/OLD, above 1 = NEW faster) is printed for each input.
#
#   cargo build --release --example parse_file && cp target/release/examples/parse_file /tmp/new
#   (the same at the older commit, to /tmp/old)
#   benches/scripts/paired-parser.sh /tmp/old /tmp/new [ROUNDS]        (default 16 rounds)
set -euo pipefail
old=$1; new=$2; rounds=${3:-16}
speeds() { "$1" | sed 's/.* \([0-9.]*\) MB\/s/\1/'; } # one line per input
for r in $(seq "$rounds"); do
  if (( r % 2 )); then a=$(speeds "$old"); b=$(speeds "$new"); else b=$(speeds "$new"); a=$(speeds "$old"); fi
  paste <(echo "$a") <(echo "$b") | awk '{printf "%d %.3f\n", NR, $2/$1}'
done | sort -k1,1n -k2,2n | awk '
  { r[$1] = r[$1] " " $2 }
  END { for (k in r) { n = split(r[k], x, " "); name = (k == 1 ? "large interchange" : "small interchanges");
        printf "%s: new/old speed median %.3f (q1 %.3f, q3 %.3f, %d rounds)\n", name, x[int((n+1)/2)], x[int(n/4)+1], x[int(3*n/4)], n } }' | sort
