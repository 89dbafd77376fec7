#!/usr/bin/env bash
# bench-rebuild.sh runs BenchmarkRebuild (projection/bench_rebuild_test.go)
# several times, one round of every variant per `go test` process, and
# prints the median events/s of each variant and the median over the rounds
# of its ratio, within the round, to setbased and inorder-ordered with the
# same batch size and to copy-only. The variants of one round run one after
# the other within a few minutes, so a ratio within a round is less exposed
# to a neighbour's load than one across rounds.
#
# Usage: scripts/bench-rebuild.sh [go test flags...]   (e.g. -rebuild.million)
#
# Environment:
#   ROUNDS=3   rounds (go test processes); 0 only summarises OUT again
#   MAX_LOAD=  if set, wait (at most 10 min) before each round until the
#              1-minute load average is below it
#   OUT=${TMPDIR:-/tmp}/bench-rebuild.txt  raw benchmark output
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
out=${OUT:-${TMPDIR:-/tmp}/bench-rebuild.txt}
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
	echo "round $r/$rounds ($(date -u +%T) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out" >&2
	go test -run '^$' -bench BenchmarkRebuild -benchtime=1x -count=1 -timeout 40m ./projection/ "$@" | tee -a "$out" >&2
done

printf "%-28s %6s %10s %12s %19s %13s %12s\n" variant rounds events/s "vs setbased" "vs inorder-ordered" "vs copy-only" peak-rss-MB
# round variant events/s [peak-rss-MB]
awk '
	/^round [0-9]+\// { r++ }
	$1 ~ /^BenchmarkRebuild\// && $3 ~ /^[0-9]+$/ {
		name = $1; sub(/^BenchmarkRebuild\//, "", name); sub(/-[0-9]+$/, "", name)
		eps = ""; rss = ""
		for (i = 3; i < NF; i += 2) {
			if ($(i+1) == "events/s") eps = $i
			if ($(i+1) == "peak-rss-MB") rss = $i
		}
		print r + 0, name, eps, rss
	}' "$out" | awk '
	function median(s,   n, v, i, j, t) {
		n = split(s, v, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
		if (n == 0) return ""
		return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	}
	{ eps[$1, $2] = $3; names[$2] = 1; rounds[$1] = 1; if ($4 != "") rss[$2] = rss[$2] " " $4 }
	END {
		for (name in names) {
			batch = name; sub(/^[^\/]*\//, "", batch)
			all = ""; rs = ""; ri = ""; rc = ""; n = 0
			for (r in rounds) {
				if (!((r, name) in eps)) continue
				x = eps[r, name]; all = all " " x; n++
				if ((r, "setbased/" batch) in eps) rs = rs " " x / eps[r, "setbased/" batch]
				if ((r, "inorder-ordered/" batch) in eps) ri = ri " " x / eps[r, "inorder-ordered/" batch]
				if ((r, "copy-only") in eps) rc = rc " " x / eps[r, "copy-only"]
			}
			f = "%.2fx"
			printf "%-28s %6d %10.0f %12s %19s %13s %12s\n", name, n, median(all),
				rs == "" ? "-" : sprintf(f, median(rs)), ri == "" ? "-" : sprintf(f, median(ri)),
				rc == "" ? "-" : sprintf(f, median(rc)), median(rss[name])
		}
	}' | sort
