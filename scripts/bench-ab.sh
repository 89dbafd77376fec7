#!/usr/bin/env bash
# bench-ab.sh measures a +effects variant of BenchmarkLedger against the same
# variant without effects (projection/bench_test.go), as A/B pairs: each run
# in its own process, workers=1, one batch of runs (-test.benchtime=1x). With
# two test binaries (the code before and after a change), every round runs
# one pair of each, the binaries' order and the variants' order swapped every
# round, so both see the same machine. Each pair prints its ratio
# (+effects / without), other-cpu-% of both runs, the load and the time; at
# the end, the median ratio of each binary over the pairs whose runs had
# other-cpu-% ≤ MAX_OTHER_CPU. It only reads.
#
# Usage: scripts/bench-ab.sh TEST_BINARY [TEST_BINARY]
#   build one with: (cd projection && go test -c -o /tmp/new.test .)
#
# Environment:
#   PAIRS=8              rounds
#   FAMILY=ordered       ordered or shuffled (inorder-$FAMILY vs inorder-$FAMILY+effects)
#   MAX_OTHER_CPU=10     pairs with a run above it are left out of the medians
#
# Run it under the team's CPU lock, on a quiet machine:
#   flock /work/team/cpu.lock scripts/bench-ab.sh /tmp/base.test /tmp/new.test
set -euo pipefail
cd "$(dirname "$0")/../projection"

pairs=${PAIRS:-8}
fam=${FAMILY:-ordered}
maxother=${MAX_OTHER_CPU:-10}
bins=("$@")
if [[ ${#bins[@]} -lt 1 ]]; then
	echo "usage: $0 TEST_BINARY [TEST_BINARY]" >&2
	exit 2
fi

# run BINARY VARIANT prints "events/s other-cpu-%".
run() {
	"$1" -test.run '^$' -test.bench "BenchmarkLedger/$2/^workers=1\$" -test.benchtime=1x |
		awk '/events\/s/ { eps = ""; other = 0
			for (i = 3; i < NF; i++) { if ($(i+1) == "events/s") eps = $i; if ($(i+1) == "other-cpu-%") other = $i }
			print eps, other }'
}

plain="^inorder-$fam\$"
effects="^inorder-$fam\\+effects\$"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for i in $(seq 1 "$pairs"); do
	order=("${bins[@]}")
	if ((i % 2 == 0)) && [[ ${#bins[@]} -eq 2 ]]; then order=("${bins[1]}" "${bins[0]}"); fi
	for bin in "${order[@]}"; do
		if ((i % 2 == 0)); then
			e=$(run "$bin" "$effects"); p=$(run "$bin" "$plain")
		else
			p=$(run "$bin" "$plain"); e=$(run "$bin" "$effects")
		fi
		read -r peps pother <<<"$p"
		read -r eeps eother <<<"$e"
		line=$(awk -v b="$(basename "$bin")" -v i="$i" -v f="$fam" -v pe="$peps" -v po="$pother" -v ee="$eeps" -v eo="$eother" \
			-v l="$(cut -d' ' -f1 /proc/loadavg)" -v t="$(date +%T)" -v m="$maxother" \
			'BEGIN { printf "%s %d %s without=%s (other %s) +effects=%s (other %s) ratio=%.3f load=%s %s%s\n",
				b, i, f, pe, po, ee, eo, ee / pe, l, t, (po + 0 > m || eo + 0 > m) ? " (left out)" : "" }')
		echo "$line"
		echo "$line" >>"$results"
	done
done

echo
grep -v 'left out' "$results" | awk '{ r = $0; sub(/.*ratio=/, "", r); sub(/ .*/, "", r); print $1, r }' | sort -k1,1 -k2n |
	awk '{ v[$1, ++n[$1]] = $2 } END { for (b in n) { k = n[b]
		m = (k % 2) ? v[b, (k + 1) / 2] : (v[b, k / 2] + v[b, k / 2 + 1]) / 2
		printf "%s: median ratio %.3f over %d pairs\n", b, m, k } }'
