#!/bin/sh
# The MoE routing study (docs/studies/moe-routing.md): the
# sweep experiments/moe-routing.ini (switch, bias, shared, gran4, gran8;
# three seeds at 6e12 training FLOPs), then the upcycling arm at the same
# total: a dense model of moe.ini's shape trained for 3e12 FLOPs, and moe
# upcycled from it (--init-from) for another 3e12; then the report.
#   ./scripts/study-moe-routing.sh [RANKS]      (default 2)
# MODE_EXP and MODE_ANALYZE choose the binaries (default: the build tree's).
set -eu
cd "$(dirname "$0")/.."
P=${1:-2}
EXE=${MODE_EXP:-build/experiments/mode-exp}
AN=${MODE_ANALYZE:-build/analysis/mode-analyze}
OUT=out/moe-routing
mpirun -n "$P" "$EXE" sweep experiments/moe-routing.ini --no-report
for s in 1 2 3; do
	common="run.out=$OUT run.seed=$s run.flops_budget=3e12 run.eval_every=250 run.ckpt_every=250
		run.routing_every=250 run.log_every=50 --quiet"
	if [ ! -f "$OUT/dense-half-s$s/run.h5" ]; then
		mpirun -n "$P" "$EXE" experiments/moe.ini run.name="dense-half-s$s" \
			'model.layers=dense x 4' $common
	fi
	if [ ! -f "$OUT/upcycled-s$s/run.h5" ]; then
		mpirun -n "$P" "$EXE" experiments/moe.ini run.name="upcycled-s$s" $common \
			--init-from "$OUT/dense-half-s$s/ckpt.h5"
	fi
done
"$AN" report "$OUT" --baseline switch
