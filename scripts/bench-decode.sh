#!/bin/sh
# The decode benchmark over trained checkpoints (docs/speed.md, "Decoding speed"):
# for every kind, `mode-exp sample CKPT --bench R` from one prompt to the
# context's end, batch 1, one thread, in ROUNDS rounds that visit the kinds
# in turn (so that each kind's and dense's numbers share the machine's
# state); per kind the median tokens/s over rounds, its ratio to dense's in
# the same round (median), the FLOPs decoding ran a token and the routed
# layers' shares of generated tokens.  BATCHES="1 16 64" times each
# batch size (sample --batch B: B sequences decoded at once, R rounds of
# them), each against dense at the same batch (default: 1).  TOKENS (default
# 115: the prompt's 13 bytes and 115 fill a context of 128) sets how many
# tokens each sequence generates; past the context every layer slides its
# window, which copies its cache each token.
#   scripts/bench-decode.sh DIR [ROUNDS] [R] [SUFFIX]
# (DIR/<kind>SUFFIX/ckpt.h5 for each kind there, one of them dense; SUFFIX
# picks one seed of a sweep's runs: -s1 for DIR/dense-s1, DIR/mod-s1, ...)
# MODE_EXP chooses the binary (default: the build tree's).
set -eu
dir=${1:?usage: bench-decode.sh DIR [ROUNDS] [R] [SUFFIX]}
rounds=${2:-3} reps=${3:-5} suffix=${4:-}
exe=${MODE_EXP:-build/experiments/mode-exp}
export OPENBLAS_NUM_THREADS=1
kinds=$(cd "$dir" && for k in *"$suffix"; do
	if [ -f "$k/ckpt.h5" ]; then echo "${k%"$suffix"}"; fi
done)
echo "$kinds" | grep -qx dense ||
	{ echo "bench-decode: no $dir/dense$suffix/ckpt.h5 to compare with" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
batches=${BATCHES:-1} tokens=${TOKENS:-115}
for b in $batches; do
	for r in $(seq 1 "$rounds"); do
		for k in $kinds; do
			"$exe" sample "$dir/$k$suffix/ckpt.h5" --prompt "The jury said" --tokens "$tokens" \
				--seed "$r" --bench "$reps" --threads 1 --batch "$b" >"$tmp/$k.$b.$r" 2>&1 ||
				{ cat "$tmp/$k.$b.$r" >&2; exit 1; }
		done
	done
done
tps() { sed -n 's/.*prompt: \([0-9.]*\) tokens\/s.*/\1/p' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| kind | batch | tokens/s (median of $rounds) | ms a token | x dense (same batch and round, median) | FLOPs a token | share of tokens taking each routed layer |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
for b in $batches; do
	for k in $kinds; do
		t=$(for r in $(seq 1 "$rounds"); do tps "$tmp/$k.$b.$r"; done | median)
		x=$(for r in $(seq 1 "$rounds"); do
			awk -v a="$(tps "$tmp/$k.$b.$r")" -v d="$(tps "$tmp/dense.$b.$r")" 'BEGIN { print a / d }'
		done | median)
		f=$(sed -n 's/# decoding ran \([0-9.e+]*\) FLOPs.*/\1/p' "$tmp/$k.$b.1")
		sh=$(sed -n 's/# decode benchmark: layer \([0-9]*\) (\([a-z]*\)): \([0-9.]*\) of.*/\1 \2 \3/p' \
			"$tmp/$k.$b.1" | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $3 }')
		awk -v k="$k" -v b="$b" -v t="$t" -v x="$x" -v f="$f" -v s="$sh" \
			'BEGIN { printf "| %s | %s | %.0f | %.3f | %.2f | %s | %s |\n", k, b, t, 1000 / t, x, f, (s == "" ? "-" : s) }'
	done
done
