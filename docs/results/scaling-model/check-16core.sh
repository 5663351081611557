#!/bin/sh
# The cluster model of `mode-analyze cluster` (analysis/clustermodel.h),
# fitted to the 1- and 2-rank points of the 16-core bench measurement
# (../scaling-16core/summary-skylakex.txt: dense, P x 1 thread) and held
# against its 4-, 8- and 16-rank points.  The bench prints times, not bytes:
# in one node the model's communication is 2 (P-1)/P K / bw with bw =
# K / comm(2), so comm(P) = 2 (P-1)/P comm(2) whatever K is.  Compute is the
# step less comm and optimizer (what the run files' compute_s counts); the
# predicted step adds the 2-rank optimizer time back.
#   sh check-16core.sh [SUMMARY]
f=${1:-$(dirname "$0")/../scaling-16core/summary-skylakex.txt}
awk '
/^== dense [0-9]+x1:/ { split($3, parts, "x"); p = parts[1] + 0; next }
p && /ms\/step/ { step[p] = $1; next }
p && /per step \(rank 0\)/ {
	for (i = 1; i <= NF; i++) { if ($i == "comm") comm[p] = $(i + 1); if ($i == "optimizer") opt[p] = $(i + 1) }
	p = 0
}
END {
	c1 = step[1] - comm[1] - opt[1]; c2 = step[2] - comm[2] - opt[2]
	e = c1 / (2 * c2); b = 2 * (c1 - c2); a = c1 - b
	printf "fit from 1 and 2 ranks: compute %.1f and %.1f ms; eff form e = %.3f; a + b/P: a = %.1f ms, b = %.1f ms\n", c1, c2, e, a, b
	printf "| ranks | measured ms/step | compute | comm | model (eff) | error | compute (eff) | error | compute (a + b/P) | error | comm (model) |\n"
	printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
	for (P = 4; P <= 16; P *= 2) {
		mc = step[P] - comm[P] - opt[P]
		ce = c1 / (P * e); ca = a + b / P; cm = 2 * (P - 1) / P * comm[2]
		pe = ce + cm + opt[2]
		printf "| %d | %.0f | %.0f | %.0f | %.0f | %+.0f%% | %.0f | %+.0f%% | %.0f | %+.0f%% | %.0f |\n", P, step[P], mc, comm[P], pe, 100 * (pe / step[P] - 1), ce, 100 * (ce / mc - 1), ca, 100 * (ca / mc - 1), cm
	}
}' "$f"
