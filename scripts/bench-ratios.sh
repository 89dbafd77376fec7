#!/usr/bin/env bash
# bench-ratios.sh runs BenchmarkLedger (projection/bench_test.go) several
# times, one whole round of every variant per `go test` process so that the
# variants are interleaved in time, and prints the median events/s of each
# variant and its ratios to the setbased and naive baselines with the same
# number of workers (and, for a +effects variant, to the same variant
# without effects). It only reads: nothing is written but the raw output
# file.
#
# Usage: scripts/bench-ratios.sh [go test flags...]
#
# Environment:
#   ROUNDS=3           rounds (go test processes); 0 only summarises OUT again
#   MAX_LOAD=          if set, wait (at most 10 min) before each round until
#                      the 1-minute load average is below it
#   MAX_OTHER_CPU=     if set, ignore runs during which other processes used
#                      more than this % of a core (the other-cpu-% metric)
#   OUT=${TMPDIR:-/tmp}/bench-ledger.txt  raw benchmark output (outside the
#                      repository, so it cannot be committed by accident)
#   BENCH=BenchmarkLedger the -bench pattern
#   VS=                more baselines for the per-round table, as
#                      "variant:baseline" pairs separated by spaces (each
#                      variant is also compared with setbased, same workers)
#
# The second table gives, for each variant, the median and the spread of
# its per-round ratios (each round is one go test process, so both runs of
# a ratio come from the same minutes): the figures docs/benchmarks.md
# quotes. Per-round ratios of unique events use the baseline's events/s.
#
# Example (quiet runs only, on a shared machine):
#   ROUNDS=5 MAX_LOAD=1 MAX_OTHER_CPU=25 scripts/bench-ratios.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
out=${OUT:-${TMPDIR:-/tmp}/bench-ledger.txt}
bench=${BENCH:-BenchmarkLedger}
if [[ "$rounds" != 0 ]]; then
	: >"$out"
fi

for r in $(seq 1 "$rounds"); do
	if [[ -n "${MAX_LOAD:-}" ]]; then
		for _ in $(seq 1 60); do
			load=$(cut -d' ' -f1 /proc/loadavg)
			awk -v l="$load" -v m="$MAX_LOAD" 'BEGIN { exit !(l < m) }' && break
			sleep 10
		done
	fi
	echo "round $r/$rounds ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	go test -run '^$' -bench "$bench" -benchtime=1x -count=1 -timeout 30m "$@" ./projection/ | tee -a "$out" >&2
done

# One line per run: variant events/s unique-events/s other-cpu-% round (each go test
# process, ended by its ok or FAIL line, is a round).
runs=$(awk -v maxother="${MAX_OTHER_CPU:-}" '
	BEGIN { round = 0 }
	/^(ok|FAIL)[ \t]/ { round++ }
	$1 ~ /^BenchmarkLedger\// && $3 ~ /^[0-9]+$/ {
		name = $1; sub(/^BenchmarkLedger\//, "", name); sub(/-[0-9]+$/, "", name)
		eps = ""; ueps = ""; other = ""
		for (i = 3; i < NF; i += 2) {
			if ($(i+1) == "events/s") eps = $i
			if ($(i+1) == "unique-events/s") ueps = $i
			if ($(i+1) == "other-cpu-%") other = $i
		}
		if (ueps == "") ueps = eps
		if (maxother != "" && other != "" && other + 0 > maxother + 0) next
		print name, eps, ueps, other, round
	}' "$out")
if [[ -z "$runs" ]]; then
	echo "no benchmark results in $out" >&2
	exit 1
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A eps ueps n
names=()
while read -r name; do
	names+=("$name")
	eps[$name]=$(awk -v k="$name" '$1 == k { print $2 }' <<<"$runs" | median)
	ueps[$name]=$(awk -v k="$name" '$1 == k { print $3 }' <<<"$runs" | median)
	n[$name]=$(awk -v k="$name" '$1 == k' <<<"$runs" | wc -l)
done < <(awk '!seen[$1]++ { print $1 }' <<<"$runs")

ratio() { # ratio value baseline-variant
	local base=${eps[$2]:-}
	if [[ -z "$base" ]]; then echo "-"; else awk -v x="$1" -v y="$base" 'BEGIN { printf "%.2fx", x / y }'; fi
}

printf '%-42s %5s %10s %16s %12s %21s %9s %19s  %s\n' variant runs events/s unique-events/s "vs setbased" "vs setbased (unique)" "vs naive" "vs without effects" target
for name in "${names[@]}"; do
	workers=${name##*/}
	target=-
	plain=-
	case $name in
	*+effects/*)
		target=">=0.75x without effects"
		plain=$(ratio "${eps[$name]}" "${name%%+effects/*}/$workers")
		;;
	inorder-ordered*) target=">=0.9x setbased" ;;
	inorder-shuffled*) target=">=0.8x setbased, >=25x naive" ;;
	esac
	printf '%-42s %5s %10.0f %16.0f %12s %21s %9s %19s  %s\n' "$name" "${n[$name]}" "${eps[$name]}" "${ueps[$name]}" \
		"$(ratio "${eps[$name]}" "setbased/$workers")" "$(ratio "${ueps[$name]}" "setbased/$workers")" \
		"$(ratio "${eps[$name]}" "naive/$workers")" "$plain" "$target"
done

# Per-round ratios, their medians and spread.
echo
awk -v vs="${VS:-}" '
	function median(list,    a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{
		if (!($1 in seen)) { seen[$1] = 1; order[++nn] = $1 }
		e[$5, $1] = $2; u[$5, $1] = $3
		if ($5 > round) round = $5
	}
	END {
		np = 0
		for (k = 1; k <= nn; k++) {
			w = order[k]; sub(/^.*\//, "", w)
			if (order[k] !~ /^setbased\//) { pv[++np] = order[k]; pb[np] = "setbased/" w }
		}
		m = split(vs, extra, " ")
		for (k = 1; k <= m; k++) { i = index(extra[k], ":"); pv[++np] = substr(extra[k], 1, i - 1); pb[np] = substr(extra[k], i + 1) }
		printf "%-48s %-34s %6s %8s %8s  %s\n", "variant", "vs (same round)", "rounds", "median", "unique", "per round"
		for (k = 1; k <= np; k++) {
			list = ""; ulist = ""; shown = ""; cnt = 0
			for (r = 0; r <= round; r++) {
				if (((r, pv[k]) in e) && ((r, pb[k]) in e) && e[r, pb[k]] > 0) {
					x = e[r, pv[k]] / e[r, pb[k]]; list = list " " x; ulist = ulist " " u[r, pv[k]] / e[r, pb[k]]
					shown = shown sprintf("%.2f ", x); cnt++
				}
			}
			if (cnt) printf "%-48s %-34s %6d %7.3fx %7.3fx  %s\n", pv[k], pb[k], cnt, median(list), median(ulist), shown
		}
	}' <<<"$runs"
