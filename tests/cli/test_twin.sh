#!/bin/sh
# The PyTorch twin (python/mode_twin, a second reading of MODEL.md and
# docs/kinds/) against mode-exp, kind by kind: train the tiny config a few
# steps, then the held-out loss (top-k and causal) of `mode-exp eval` on the
# windows it records, and on a token file's evenly spread windows, must agree
# to 1e-5 relative, and `mode-exp sample --temperature 0` must give the
# twin's greedy tokens. 150 steps at lr 1e-2 make the routers decide and
# the greedy tokens vary (24 steps give spaces only).
#   test_twin.sh MODE_EXP CONFIG [NAME ...]   (NAME: only those checks)
# Skipped (exit 77) where Debian's python3-torch or python3-h5py is missing.
set -u
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$1") config=$(abspath "$2")
shift 2
only=" $* "
src=$(cd "$(dirname "$0")/../.." && pwd) here=$(cd "$(dirname "$0")" && pwd)
py=${MODE_TWIN_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
if ! "$py" -c 'import torch, h5py' 2>/dev/null; then
	echo "SKIP: $py cannot import torch and h5py (scripts/setup-deps.sh installs python3-torch python3-h5py)"
	exit 77
fi
export PYTHONPATH="$src/python"
enter_workdir

twin() { "$py" "$here/twin_check.py" "$@"; }
ran=0

# check NAME LAYERS [KEY=VALUE ...]
check() {
	name=$1 layers=$2
	shift 2
	case $only in "  " | *" $name "*) ;; *) return 0 ;; esac
	mpirun -n 1 "$exe" "$config" run.out=o run.name="$name" run.steps=150 optim.lr=1e-2 \
		run.ckpt_every=150 run.eval_every=150 "model.layers=$layers" "$@" \
		--quiet >train.txt 2>&1 || fail "$name: training: $(cat train.txt)"
	ckpt=o/$name/ckpt.h5 d=$name
	mkdir "$d"
	for mode in topk causal; do
		"$exe" eval "$ckpt" --mode "$mode" --windows 6 --json --record "$d/rec-$mode.h5" >"$d/rec-$mode.json" ||
			fail "$name: mode-exp eval --mode $mode"
	done
	# a token file: the 6 windows of S+1 tokens back to back; eval takes 4 of
	# its floor((6 (S+1) - 1) / S) windows, spread as MODEL.md's evaluation says
	twin prep "$d/rec-topk.h5" "$d/held.bin" >"$d/prompt.txt" || fail "$name: writing held.bin"
	for mode in topk causal; do
		"$exe" eval "$ckpt" --data "$d/held.bin" --mode "$mode" --windows 4 --json >"$d/data-$mode.json" ||
			fail "$name: mode-exp eval --data --mode $mode"
	done
	"$exe" sample "$ckpt" --prompt-ids "$(cat "$d/prompt.txt")" --tokens 20 --temperature 0 --ids \
		>"$d/sample.txt" 2>&1 || fail "$name: mode-exp sample: $(cat "$d/sample.txt")"
	"$exe" export "$ckpt" "$d/export" >"$d/export.txt" 2>&1 || fail "$name: mode-exp export: $(cat "$d/export.txt")"
	twin check "$name" "$ckpt" "$d" || fail "$name: the twin differs from mode-exp"
	ran=$((ran + 1))
}

check dense 'dense x 2'
check mod 'dense, mod, dense, mod'
check mod-predictor 'dense, mod' mod.causal=predictor mod.gate=raw
check moe 'dense, moe' moe.experts=4 moe.top_k=2 moe.capacity_factor=1
check integrated 'dense, integrated' moe.experts=4 moe.top_k=2
check staged 'dense, staged' mod.capacity=0.25 moe.experts=4 moe.top_k=2
check moe-options 'dense, moe' moe.experts=4 moe.granularity=2 moe.score=sigmoid moe.renormalize=true \
	moe.shared_experts=1 moe.bias_rate=0.001 moe.eval_capacity_factor=0.5
check ec 'dense, ec' ec.experts=4
check tcmod 'dense, tcmod'
check mor 'dense, mor' mor.schedule=geometric
check drop 'drop x 3' drop.rescale=false drop.prune_every=3
check exit 'dense, exit, dense, exit, dense' exit.threshold=0.3
check exit-divergence 'dense, exit, dense, exit, dense' exit.confidence=divergence exit.threshold=0.05
# the kinds of issue 45: skipdecode's schedule (T_1, T_2 = 16, 26 of 32: the
# greedy tokens past 16 skip layer 1), cla's groups of three and two, and
# mod's fitted threshold (tau + theta, theta a dial) trained under a schedule
check skipdecode 'dense, skipdecode, skipdecode, dense'
check cla 'dense, cla, cla, dense, cla'
check mod-threshold 'dense, mod' mod.causal=threshold mod.causal_threshold=0.3 \
	mod.capacity_schedule=cosine mod.schedule_steps=50
[ "$ran" -gt 0 ] || fail "no check is named:$only"
