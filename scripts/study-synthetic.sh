#!/bin/sh
# Where could learned routing beat random?  The synthetic study
# (experiments/synthetic.ini; run it first, or this script runs it): MoD at
# 12.5% with a learned and a random router, three seeds each, on the corpus
# whose tokens are labelled easy, medium, hard and filler.  For every seed:
# both checkpoints evaluated in top-k mode on the same held-out windows with
# their per-token losses recorded, the learned one also under counterfactual
# routing (a random k, the k lowest scores); then
#   - compare: the final losses, learned against random, with the power
#     analysis (seeds a side for the difference seen);
#   - tokens: the share of each difficulty class each router takes, by the
#     class of the token a position holds and of the one it predicts;
#   - lossdiff: the random router's model minus the learned one's, per
#     difficulty, seed by seed and pooled over the three seeds;
#   - counterfactual: what the learned model loses without its choices.
#   ./scripts/study-synthetic.sh [RANKS] [WINDOWS]   (defaults 2, 512)
# MODE_EXP and MODE_ANALYZE choose the binaries (default: the build tree's).
set -eu
cd "$(dirname "$0")/.."
P=${1:-2}
W=${2:-512}
EXE=${MODE_EXP:-build/experiments/mode-exp}
AN=${MODE_ANALYZE:-build/analysis/mode-analyze}
OUT=out/synthetic
E=$OUT/eval
[ -d "$OUT" ] || mpirun -n "$P" "$EXE" sweep experiments/synthetic.ini
mkdir -p "$E"
complete=$("$EXE" sweep experiments/synthetic.ini --dry-run |
	awk '$3 == "steps" && $4 == "complete" { printf "%s ", $1 }')
pairs=
csvs=
learned=
random=
for n in $complete; do
	case $n in router-learned-s*) ;; *) continue ;; esac
	s=${n#router-learned-}
	case " $complete " in *" router-random-$s "*) ;; *) continue ;; esac
	for r in learned random; do
		rec="$E/$r-$s.record.h5"
		[ -f "$rec" ] || mpirun -n "$P" "$EXE" eval "$OUT/router-$r-$s/ckpt.h5" --mode topk \
			--windows "$W" --record "$rec" >/dev/null
	done
	csv="$E/counterfactual-$s.csv"
	if [ ! -f "$csv" ]; then
		mpirun -n "$P" "$EXE" eval "$OUT/router-learned-$s/ckpt.h5" --mode topk --windows "$W" \
			--routing random,bottom --csv "$csv.part" >"$E/counterfactual-$s.txt"
		mv "$csv.part" "$csv"
	fi
	pairs="$pairs $E/learned-$s.record.h5 $E/random-$s.record.h5"
	csvs="$csvs $csv"
	learned="$learned $OUT/router-learned-$s/run.h5"
	random="$random $OUT/router-random-$s/run.h5"
done
[ -n "$pairs" ] || { echo "study-synthetic: no seed with both routers complete in $OUT" >&2; exit 1; }
"$AN" compare "$OUT" --baseline router-random --out "$E"
for r in learned random; do
	mkdir -p "$E/tokens-$r" "$E/tokens-$r-predicted"
done
"$AN" tokens $learned --out "$E/tokens-learned"
"$AN" tokens $random --out "$E/tokens-random"
"$AN" tokens $learned --predicted --out "$E/tokens-learned-predicted"
"$AN" tokens $random --predicted --out "$E/tokens-random-predicted"
"$AN" lossdiff $pairs --out "$E"
"$AN" counterfactual $csvs --out "$E"
