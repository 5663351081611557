#!/bin/sh
# What does a trained MoD model owe to its router's choices?  Counterfactual
# routing (docs/instruments.md) on every MoD checkpoint of the 8-layer
# capacity study (experiments/capacity-deep.ini; run it first, or this
# script runs it): each checkpoint evaluated in top-k mode on the same
# held-out windows with its learned decisions, with a random k of each
# sequence, with the k lowest scores and with another window's decisions,
# and with its own recorded decisions replayed (which must equal learned bit
# for bit: the table's "same windows"), then the tables pooled over seeds.
#   ./scripts/study-counterfactual.sh [RANKS] [WINDOWS]   (defaults 2, 1024)
# MODE_EXP and MODE_ANALYZE choose the binaries (default: the build tree's).
set -eu
cd "$(dirname "$0")/.."
P=${1:-2}
W=${2:-1024}
EXE=${MODE_EXP:-build/experiments/mode-exp}
AN=${MODE_ANALYZE:-build/analysis/mode-analyze}
OUT=out/capacity-deep
[ -d "$OUT" ] || mpirun -n "$P" "$EXE" sweep experiments/capacity-deep.ini
mkdir -p "$OUT/counterfactual"
# the complete runs only (a run in progress rewrites its checkpoint), as the
# sweep itself sees them
complete=$("$EXE" sweep experiments/capacity-deep.ini --dry-run |
	awk '$3 == "steps" && $4 == "complete" && $1 !~ /^dense-/ { print $1 }')
csvs=
for n in $complete; do
	d="$OUT/$n"
	csv="$OUT/counterfactual/$n.csv"
	if [ ! -f "$csv" ]; then
		rec="$OUT/counterfactual/$n.record.h5"
		rm -f "$rec"
		mpirun -n "$P" "$EXE" eval "$d/ckpt.h5" --mode topk --windows "$W" --record "$rec" \
			>/dev/null
		mpirun -n "$P" "$EXE" eval "$d/ckpt.h5" --mode topk --windows "$W" \
			--routing "random,bottom,shuffle,replay:$rec" --csv "$csv.part" >"$OUT/counterfactual/$n.txt"
		mv "$csv.part" "$csv"
		rm -f "$rec"
	fi
	csvs="$csvs $csv"
done
"$AN" counterfactual $csvs --out "$OUT/counterfactual"
