#!/bin/sh
# End-to-end tests of mode-analyze on small runs of the tiny config.
#   test_analysis.sh TEST MODE_EXP MODE_ANALYZE CONFIG
# TEST: heatmap | weights | curves | compare | tokens | errors
# Figures are checked as PNGs of the size the layout defines (IHDR read with
# od); tables against the run files themselves (h5dump, h5ls) and against
# `mode-exp flops`.
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") an=$(abspath "$3") config=$(abspath "$4")
enter_workdir

train() { # dir overrides...: train the tiny config into dir/tiny
	dir=$1
	shift
	"$exe" "$config" run.out="$dir" --quiet "$@" || fail "mode-exp $*"
}
train_dense() { train d; }
train_mod() { train m 'model.layers=(dense, mod) x 2' mod.capacity=0.25; }
train_moe() { train e 'model.layers=(dense, staged, dense, integrated)' moe.experts=4 mod.capacity=0.5; }

# png FILE WIDTH HMIN HMAX: a PNG WIDTH wide and HMIN..HMAX high
png() {
	[ -s "$1" ] || fail "$1 missing or empty"
	[ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 is not a PNG"
	[ "$(od -An -c -j12 -N4 "$1" | tr -d ' \n')" = IHDR ] || fail "$1 has no IHDR first"
	size=$(od -An -tu1 -j16 -N8 "$1" |
		awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4, $5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }')
	w=${size% *} h=${size#* }
	[ "$w" -eq "$2" ] || fail "$1 is $w px wide, expected $2"
	[ "$h" -ge "$3" ] && [ "$h" -le "$4" ] || fail "$1 is $h px high, expected $3..$4"
	[ "$(wc -c <"$1")" -gt 2000 ] || fail "$1 is too small to hold a figure"
}
# values FILE DATASET: the dataset's values, one a line, full precision
values() {
	h5dump -y -w 0 -m '%.17g' -d "$2" "$1" | sed -n '/^   DATA {/,/^   }/p' | sed '1d;$d' |
		tr -d ' ' | tr ',' '\n' | grep -v '^$'
}
# close A B TOL: |A - B| <= TOL * max(|A|, |B|, 1e-300)
close() {
	awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d;
		m = a < 0 ? -a : a; n = b < 0 ? -b : b; if (n > m) m = n; exit !(d <= t * m + 1e-300) }'
}
# csv FILE ROW COLUMN: a field (rows from 1 after the header; quoted fields
# may hold commas)
csv() {
	awk -v r="$2" -v c="$3" 'NR == r + 1 { n = 0; f = ""; q = 0
		for (i = 1; i <= length($0); i++) { ch = substr($0, i, 1)
			if (ch == "\"") q = !q; else if (ch == "," && !q) { if (++n == c) break; f = "" } else f = f ch }
		if (n == c - 1 || n == c) print f }' "$1"
}
# width of a heatmap of S positions: the layout of analysis/heatmap.c
hm_width() { [ "$1" -gt 48 ] && echo $((174 + 10 * $1)) || echo $((174 + 10 * 48)); }

case $test_name in
heatmap)
	train_mod
	train_moe
	train m64 'model.layers=(dense, mod) x 2' data.seq_len=64 run.routing_every=8
	out=$("$an" heatmap m/tiny/run.h5) || fail "heatmap"
	echo "$out"
	echo "$out" | grep -q "^wrote m/tiny/heatmap_step24_seq0.png$" || fail "heatmap path: $out"
	# 4 layers of 24 px and 1 or 2 legend rows: 258 or 278 px
	png m/tiny/heatmap_step24_seq0.png "$(hm_width 32)" 258 278
	"$an" heatmap m/tiny/run.h5 --step 12 --seq 3 --svg >out.txt || fail "heatmap --step --seq"
	png m/tiny/heatmap_step12_seq3.png "$(hm_width 32)" 258 278
	head -c 200 m/tiny/heatmap_step12_seq3.svg | grep -q "<svg" || fail "no SVG"
	grep -q "heatmap_step12_seq3.svg" out.txt || fail "svg path not printed"
	# experts, the no-op and drops; legend of up to 11 items in 3 columns
	"$an" heatmap e/tiny/run.h5 --out figs >/dev/null || fail "heatmap moe"
	png figs/heatmap_step24_seq0.png "$(hm_width 32)" 258 318
	# the width follows S: 10 px a position
	"$an" heatmap m64/tiny/run.h5 --step 16 --seq 1 >/dev/null || fail "heatmap S=64"
	png m64/tiny/heatmap_step16_seq1.png "$(hm_width 64)" 258 278
	ls m/tiny e/tiny figs | grep -q tmp && fail "temporary files left behind"
	;;
weights)
	train_mod
	train_moe
	"$an" weights m/tiny/run.h5 | grep -q "^wrote m/tiny/weights.png$" || fail "weights"
	png m/tiny/weights.png 810 382 382 # two routed layers side by side
	"$an" weights e/tiny/run.h5 --out w >/dev/null || fail "weights staged"
	png w/weights.png 410 382 382      # staged has scores, integrated none
	;;
curves)
	train_dense
	train_mod
	train_moe
	"$an" curves d/tiny/run.h5 m/tiny/run.h5 e/tiny/run.h5 --out c | grep -q "^wrote c/curves.png$" ||
		fail "curves"
	png c/curves.png 1340 430 430
	"$an" curves m/tiny/run.h5 >/dev/null || fail "curves of one run"
	png m/tiny/curves.png 1340 430 430
	;;
compare)
	train_dense
	train_mod
	train_moe
	out=$("$an" compare d/tiny/run.h5 m/tiny/run.h5 e/tiny/run.h5 --out c) || fail "compare"
	echo "$out"
	echo "$out" | grep -q "^| run | layers |" || fail "no table printed"
	[ "$(grep -c '^| ' c/compare.md)" -eq 5 ] || fail "compare.md rows"
	[ "$(wc -l <c/compare.csv)" -eq 4 ] || fail "compare.csv rows"
	row=1
	for r in d m e; do
		f=$r/tiny/run.h5
		case $r in
		d) kinds='dense x2' fl=$("$exe" flops "$config") ;;
		m) kinds='dense x2, mod x2' fl=$("$exe" flops "$config" 'model.layers=(dense, mod) x 2' mod.capacity=0.25) ;;
		e) kinds='dense x2, staged, integrated'
			fl=$("$exe" flops "$config" 'model.layers=(dense, staged, dense, integrated)' moe.experts=4 mod.capacity=0.5) ;;
		esac
		fl=$(echo "$fl" | sed -n 's/^forward per sequence *\([^ ]*\).*/\1/p')
		[ -n "$fl" ] || fail "mode-exp flops for $r"
		[ "$(csv c/compare.csv $row 2)" = "$kinds" ] || fail "$r layers: $(csv c/compare.csv $row 2)"
		# the final held-out losses are the last rows of /eval
		close "$(csv c/compare.csv $row 8)" "$(values $f eval/loss_topk | tail -n 1)" 1e-12 ||
			fail "$r loss_topk"
		close "$(csv c/compare.csv $row 9)" "$(values $f eval/loss_causal | tail -n 1)" 1e-12 ||
			fail "$r loss_causal"
		# parameters: every checkpoint dataset but the Adam moments
		p=$(h5ls -r $r/tiny/ckpt.h5 | grep Dataset | grep -v '^/optim' |
			sed 's/.*{\(.*\)}.*/\1/' | awk -F', ' '{ n = 1; for (i = 1; i <= NF; i++) n *= $i; s += n } END { print s }')
		[ "$(csv c/compare.csv $row 4)" = "$p" ] || fail "$r params $(csv c/compare.csv $row 4), ckpt $p"
		[ "$(csv c/compare.csv $row 5)" = record ] || fail "$r params not from the run file's record"
		# FLOPs per forward pass: what `mode-exp flops` says (4 digits)
		close "$(csv c/compare.csv $row 6)" "$fl" 1e-3 || fail "$r flops $(csv c/compare.csv $row 6) vs $fl"
		# steps/s = last step / last wall time
		w=$(values $f metrics/wall_s | tail -n 1)
		close "$(csv c/compare.csv $row 7)" "$(awk -v w="$w" 'BEGIN { print 24 / w }')" 1e-3 ||
			fail "$r steps/s"
		row=$((row + 1))
	done
	# the causal rule of the mod run: mean over layers 1, 3 of the last 3 of 24 steps
	for k in precision:10 recall:11 causal_capacity:12; do
		col=${k%:*} n=${k#*:}
		want=$( (values m/tiny/run.h5 layer_stats/1/$col | tail -n 3
			values m/tiny/run.h5 layer_stats/3/$col | tail -n 3) | awk '{ s += $1 } END { printf "%.17g", s / NR }')
		close "$(csv c/compare.csv 2 $n)" "$want" 1e-9 || fail "mod $col $(csv c/compare.csv 2 $n) vs $want"
	done
	[ "$(csv c/compare.csv 1 10)" = "-" ] || fail "dense run has a precision"
	# the checkpoint is not needed
	mkdir -p n/tiny && cp m/tiny/run.h5 n/tiny/
	"$an" compare n/tiny/run.h5 >/dev/null || fail "compare without ckpt"
	[ "$(csv n/tiny/compare.csv 1 4)" = "$(csv c/compare.csv 2 4)" ] || fail "params without the checkpoint differ"
	;;
tokens)
	train_mod
	out=$("$an" tokens m/tiny/run.h5) || fail "tokens"
	echo "$out"
	for f in tokens.md tokens.csv; do
		echo "$out" | grep -q "^wrote m/tiny/$f$" || fail "$f not written"
	done
	png m/tiny/tokens.png 1100 450 450
	# recount layer 1 and 3 at step 24 from the routing datasets
	S=32
	values m/tiny/run.h5 routing/labels >labels.txt
	for l in 1 3; do
		values m/tiny/run.h5 routing/step_000024/layer_$l/selected >sel.txt
		awk -v S=$S -v l=$l 'NR == FNR { lab[NR - 1] = $1; next }
			{ k = FNR - 1; r = int(k / S); i = k % S; c = lab[r * (S + 1) + i]; n[c]++; t[c] += $1 }
			END { split("easy medium hard filler", name, " ")
				for (c = 0; c < 4; c++) printf "%d,mod,class,%s,%d,%d\n", l, name[c + 1], n[c], t[c] }' \
			labels.txt sel.txt >want.txt
		grep "^$l,mod,class," m/tiny/tokens.csv | cut -d, -f1-6 >got.txt
		cmp -s want.txt got.txt || fail "layer $l class counts: $(cat got.txt) vs $(cat want.txt)"
	done
	echo "$out" | grep -q "| layer | H(took) | MI class |" || fail "no position/class statistic"
	echo "$out" | grep -q "degenerate" && fail "a learned router called degenerate"
	"$an" tokens m/tiny/run.h5 --all-steps --out all | grep -q "steps 12 to 24" || fail "--all-steps"
	# a capacity of 1 takes every position of every sequence
	train f 'model.layers=(dense, mod)' mod.capacity=1.0
	"$an" tokens f/tiny/run.h5 | grep -q "^layer 1: degenerate: selects the same positions in every sequence" ||
		fail "degenerate router not reported"
	;;
errors)
	train_dense
	train_mod
	expect() { # code message command...: exit status and a one-line message
		code=$1 msg=$2
		shift 2
		"$@" >out.txt 2>err.txt
		rc=$?
		[ "$rc" -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat err.txt)"
		grep -q -- "$msg" err.txt || fail "$* said: $(cat err.txt); expected: $msg"
		[ "$(wc -l <err.txt)" -eq 1 ] || fail "$*: more than one line: $(cat err.txt)"
	}
	expect 1 "nothing.h5: no such file" "$an" heatmap nothing.h5
	echo "not hdf5" >text.h5
	expect 1 "text.h5: not an HDF5 file" "$an" compare text.h5
	h5copy -i m/tiny/ckpt.h5 -o foreign.h5 -s tok_emb -d tok_emb || fail "h5copy"
	expect 1 "foreign.h5: an HDF5 file, but not one mode wrote" "$an" tokens foreign.h5
	expect 1 "ckpt.h5: a checkpoint, not a run file" "$an" heatmap m/tiny/ckpt.h5
	expect 1 "step 7 is not recorded (recorded steps: 12, 24)" "$an" heatmap m/tiny/run.h5 --step 7
	expect 1 "step 5 is not recorded" "$an" tokens m/tiny/run.h5 --step 5
	expect 1 "seq 99 is out of range: the file records 32 sequences (0 to 31)" \
		"$an" heatmap m/tiny/run.h5 --seq 99
	expect 1 "no routing records: the model has no routed layer (layers = dense x 2)" \
		"$an" heatmap d/tiny/run.h5
	expect 1 "no routing records" "$an" weights d/tiny/run.h5
	expect 1 "no routing records" "$an" tokens d/tiny/run.h5
	expect 1 "nothing.h5: no such file" "$an" curves m/tiny/run.h5 nothing.h5
	touch plain
	expect 1 "plain: not a folder" "$an" weights m/tiny/run.h5 --out plain
	expect 2 "unknown option --bogus" "$an" heatmap m/tiny/run.h5 --bogus
	expect 2 "--step abc: expected a step number" "$an" heatmap m/tiny/run.h5 --step abc
	expect 2 "unknown option --seq" "$an" tokens m/tiny/run.h5 --seq 1
	expect 2 "too many run files" "$an" heatmap m/tiny/run.h5 m/tiny/run.h5
	expect 2 "no run file given" "$an" compare
	expect 2 "--out needs a value" "$an" compare m/tiny/run.h5 --out
	"$an" nonsense >out.txt 2>&1; [ $? -eq 2 ] || fail "unknown command exit code"
	"$an" >out.txt 2>&1; [ $? -eq 2 ] || fail "no command exit code"
	for c in heatmap weights curves compare tokens; do
		"$an" $c --help | grep -q "^usage: mode-analyze $c" || fail "$c --help"
	done
	"$an" --help | grep -q "^usage: mode-analyze COMMAND" || fail "--help"
	# nothing was written by the refused commands
	[ "$(ls m/tiny | sort | tr '\n' ' ')" = "ckpt.h5 run.h5 " ] || fail "output left behind: $(ls m/tiny)"
	[ "$(ls d/tiny | sort | tr '\n' ' ')" = "ckpt.h5 run.h5 " ] || fail "output left behind: $(ls d/tiny)"
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "ok: $test_name"
