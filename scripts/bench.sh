#!/bin/sh
# Benchmarks of every kind at the bench shape (experiments/bench/), at one
# rank with 2 threads and at 2 ranks with one thread each, in fp32 and with
# [run] precision = bf16 (on the fastest bf16 path the CPU has, or the one
# MODE_BF16_KERNEL names), as one JSON line per run in bench.jsonl and a
# Markdown table on stdout.  Speed is measured here, never asserted by tests.
# Then the PyTorch peer (python/bench_peer.py: MODEL.md's dense and mod in
# PyTorch, fp32 and autocast bf16, 2 threads) on the dense and mod configs,
# each right after mode-exp at 1 x 2 on the same config, into peer.jsonl, and
# the ratio of their step times; skipped, with a line saying so, where
# Debian's python3-torch does not import.
#   ./scripts/bench.sh [STEPS]
set -eu
cd "$(dirname "$0")/.."
steps=${1:-10}
exe=build/experiments/mode-exp
[ -x "$exe" ] || { meson setup build -Dbuildtype=release && meson compile -C build; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
: >bench.jsonl
for p in fp32 bf16; do
	for c in dense mod-12 mod-50 moe staged integrated; do
		"$exe" bench "experiments/bench/$c.ini" run.precision=$p --steps "$steps" --threads 2 \
			--json >>bench.jsonl
		mpirun -n 2 "$exe" bench "experiments/bench/$c.ini" run.precision=$p --steps "$steps" \
			--threads 1 --json >>bench.jsonl
	done
done
echo "| config | precision | ranks x threads | ms/step | tokens/s | GFLOP/s nominal | GFLOP/s executed | sgemm GFLOP/s (same run) | nominal/sgemm | bf16 products GFLOP/s (same run) | peak RSS MiB | activations MiB |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk '
function get(k,   r) { r = $0; sub(".*\"" k "\": \"?", "", r); sub("[\",}].*", "", r); return r }
{
	c = get("config"); sub(".*/", "", c); sub("\\.ini", "", c)
	b = get("bf16_gflops") + 0 > 0 ? sprintf("%.0f", get("bf16_gflops")) : "-"
	p = get("precision"); if (p == "bf16") p = p " (" get("bf16_kernel") ")"
	printf "| %s | %s | %s x %s | %.0f | %.0f | %.1f | %.1f | %.1f | %.0f%% | %s | %.0f | %.0f |\n", c,
		p, get("ranks"), get("threads"), get("step_s") * 1000,
		get("tokens_per_s"), get("gflops_nominal"), get("gflops_executed"),
		get("sgemm_gflops"), get("ratio_nominal") * 100, b, get("peak_rss_mb"),
		get("activation_mb")
}' bench.jsonl

py=${MODE_PEER_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import torch' 2>/dev/null; then
	echo
	echo "PyTorch peer skipped: $py cannot import torch (scripts/setup-deps.sh installs python3-torch)"
	exit 0
fi
# Pairs measured seconds apart, mode-exp first: the ratio is what to compare
# (the machines are shared; absolute times move with the load).
: >peer.jsonl
for p in fp32 bf16; do
	for c in dense mod-12 mod-50; do
		"$exe" bench "experiments/bench/$c.ini" run.precision=$p --steps "$steps" --threads 2 \
			--json >>peer.jsonl
		"$py" python/bench_peer.py "experiments/bench/$c.ini" --precision $p --threads 2 \
			--steps "$steps" >>peer.jsonl
	done
done
echo
echo "| config | precision | mode-exp ms/step (1 x 2) | PyTorch ms/step (2 threads) | PyTorch / mode-exp |"
echo "| --- | --- | ---: | ---: | ---: |"
awk '
function get(k,   r) { r = $0; sub(".*\"" k "\": \"?", "", r); sub("[\",}].*", "", r); return r }
/"peer": "pytorch"/ { c = get("config"); sub(".*/", "", c); sub("\\.ini", "", c)
	printf "| %s | %s | %.0f | %.0f | %.2f |\n", c, get("precision"), m * 1000,
		get("step_s") * 1000, get("step_s") / m; next }
{ m = get("step_s") }' peer.jsonl
