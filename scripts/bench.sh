#!/bin/sh
# Benchmarks of every kind at the bench shape (experiments/bench/), at one
# rank with 2 threads and at 2 ranks with one thread each, in fp32 and with
# [run] precision = bf16 (on the fastest bf16 path the CPU has, or the one
# MODE_BF16_KERNEL names), as one JSON line per run in bench.jsonl and a
# Markdown table on stdout.  Speed is measured here, never asserted by tests.
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
