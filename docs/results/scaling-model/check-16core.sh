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
	printf "| ranks | measured ms/step | compute | comm | model (eff) | error | compute (eff) | error | compute (a + b/P) | error | comm (model) | step, 8-rank rate | error |\n"
	printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
	for (P = 4; P <= 16; P *= 2) {
		mc = step[P] - comm[P] - opt[P]
		ce = c1 / (P * e); ca = a + b / P; cm = 2 * (P - 1) / P * comm[2]
		pe = ce + cm + opt[2]
		# the in-node rate of the 8-rank point instead: comm(P) = 2 (P-1)/P K / bw8
		p8 = ce + (2 * (P - 1) / P) / (2 * 7 / 8) * comm[8] + opt[2]
		printf "| %d | %.0f | %.0f | %.0f | %.0f | %+.0f%% | %.0f | %+.0f%% | %.0f | %+.0f%% | %.0f | %.0f | %+.0f%% |\n", P, step[P], mc, comm[P], pe, 100 * (pe / step[P] - 1), ce, 100 * (ce / mc - 1), ca, 100 * (ca / mc - 1), cm, p8, 100 * (p8 / step[P] - 1)
	}
	# 64 nodes x 64 cores, 100 Gbit/s, 2 us, one sequence a rank (4096): compute
	# from the fit, the in-node rate from the 2-rank point (as the model does)
	# and from the 8-rank point (45 MB in its comm seconds); K = 4 bytes x
	# 6492416 parameters (the run files of the bench shape: comm_bytes at 2 ranks)
	K = 4 * 6492416; C = 64; N = 64; P = C * N
	ce = c1 / (16 * e); inter = (2 * (N - 1) / N * K / 12.5e9 + 2 * (N - 1) * 2e-6) * 1e3
	bw2 = K / comm[2]; bw8 = 2 * 7 / 8 * K / comm[8]
	for (v = 2; v <= 8; v += 6) {
		bw = v == 2 ? bw2 : bw8
		st = ce + 2 * (C - 1) / C * K / bw + inter + opt[2]
		printf "64 x 64 cores, in-node rate from the %d-rank point (%.2f GB/s): %.0f ms a step, %.2fM tokens/s, efficiency %.2f\n", v, bw * 1e-6, st, P * 256 / st * 1e-3, c1 * 256 / (P * st)
	}
}' "$f"
