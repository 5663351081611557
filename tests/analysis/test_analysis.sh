#!/bin/sh
# End-to-end tests of mode-analyze on small runs of the tiny config, and on
# run files with known numbers written through the run-file API
# (write_runs, tests/analysis/runfiles.h).
#   test_analysis.sh TEST MODE_EXP MODE_ANALYZE CONFIG WRITE_RUNS
# TEST: heatmap | weights | curves | compare | tokens | errors | groups |
#       sweep | isoflop | huge | ladder | routing | depth | counterfactual |
#       cluster
# Figures are checked as PNGs of the size the layout defines (IHDR read with
# od); tables against the run files themselves (h5dump, h5ls), against
# `mode-exp flops`, and against numbers worked out by hand.
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") an=$(abspath "$3") config=$(abspath "$4") write_runs=$(abspath "$5")
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
# field FILE ROW NAME: the field of the column headed NAME
field() {
	c=$(head -n 1 "$1" | tr ',' '\n' | grep -n -x -F -- "$3" | cut -d: -f1)
	[ -n "$c" ] || fail "$1: no column $3"
	csv "$1" "$2" "$c"
}
# row FILE COLUMN VALUE: the first row (from 1 after the header) whose
# column NAME holds VALUE
row() {
	c=$(head -n 1 "$1" | tr ',' '\n' | grep -n -x -F -- "$2" | cut -d: -f1)
	n=$(($(wc -l <"$1") - 1))
	for r in $(seq 1 "$n"); do
		[ "$(csv "$1" "$r" "$c")" = "$3" ] && { echo "$r"; return; }
	done
	fail "$1: no row with $2 = $3"
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
	png c/curves.png 1340 444 444
	"$an" curves m/tiny/run.h5 >/dev/null || fail "curves of one run"
	# bits per byte on the y axis (byte-level runs: nats / ln 2)
	"$an" curves d/tiny/run.h5 m/tiny/run.h5 --bpb --out cb | grep -q "^wrote cb/curves.png$" ||
		fail "curves --bpb"
	png m/tiny/curves.png 1340 444 444
	# a run whose budget counts executed FLOPs is drawn at what it ran (its
	# rows' train_flops_executed summed), beside a nominal one
	train x 'model.layers=dense, integrated' run.steps=0 run.flops_budget=2e9 \
		run.flops_count=executed
	"$an" curves x/tiny/run.h5 d/tiny/run.h5 --out cx | grep -q "^wrote cx/curves.png$" ||
		fail "curves of an executed-budget run"
	png cx/curves.png 1340 444 444
	;;
compare)
	train_dense
	train_mod
	train_moe
	out=$("$an" compare d/tiny/run.h5 m/tiny/run.h5 e/tiny/run.h5 --out c) || fail "compare"
	echo "$out"
	echo "$out" | grep -q "^| group | n | layers |" || fail "no table printed"
	[ "$(grep -c '^| ' c/compare.md)" -eq 5 ] || fail "compare.md rows"
	[ "$(wc -l <c/compare.csv)" -eq 4 ] || fail "compare.csv rows"
	[ "$(wc -l <c/compare_groups.csv)" -eq 4 ] || fail "compare_groups.csv rows"
	# three runs of one name in three folders: three groups of one, named by folder
	for r in d m e; do
		f=$r/tiny/run.h5
		row=$(row c/compare.csv run "$r/tiny")
		case $r in
		d) kinds='dense x2' fl=$("$exe" flops "$config") ;;
		m) kinds='dense x2, mod x2' fl=$("$exe" flops "$config" 'model.layers=(dense, mod) x 2' mod.capacity=0.25) ;;
		e) kinds='dense x2, staged, integrated'
			fl=$("$exe" flops "$config" 'model.layers=(dense, staged, dense, integrated)' moe.experts=4 mod.capacity=0.5) ;;
		esac
		fl=$(echo "$fl" | sed -n 's/^forward per sequence *\([^ ]*\).*/\1/p')
		[ -n "$fl" ] || fail "mode-exp flops for $r"
		[ "$(field c/compare.csv $row layers)" = "$kinds" ] || fail "$r layers: $(field c/compare.csv $row layers)"
		[ "$(field c/compare.csv $row group)" = "$r/tiny" ] || fail "$r group"
		# the final held-out losses and their standard errors are the last rows of /eval
		for k in loss_topk loss_causal se_topk se_causal; do
			close "$(field c/compare.csv $row $k)" "$(values $f eval/$k | tail -n 1)" 1e-12 ||
				fail "$r $k"
		done
		[ "$(field c/compare.csv $row eval_windows)" = "$(values $f eval/windows | tail -n 1)" ] ||
			fail "$r eval_windows"
		# parameters: every checkpoint dataset but the Adam moments, as the run file records them
		p=$(h5ls -r $r/tiny/ckpt.h5 | grep Dataset | grep -v '^/optim' |
			sed 's/.*{\(.*\)}.*/\1/' | awk -F', ' '{ n = 1; for (i = 1; i <= NF; i++) n *= $i; s += n } END { print s }')
		[ "$(field c/compare.csv $row params)" = "$p" ] || fail "$r params $(field c/compare.csv $row params), ckpt $p"
		[ "$(field c/compare.csv $row params)" = "$(values $f model/parameters)" ] || fail "$r params record"
		[ "$(field c/compare.csv $row params_from)" = record ] || fail "$r params not from the run file's record"
		# FLOPs per forward pass: what `mode-exp flops` says (4 digits)
		close "$(field c/compare.csv $row flops_per_seq)" "$fl" 1e-3 || fail "$r flops vs $fl"
		# steps/s = last step / last wall time
		w=$(values $f metrics/wall_s | tail -n 1)
		close "$(field c/compare.csv $row steps_per_s)" "$(awk -v w="$w" 'BEGIN { print 24 / w }')" 1e-3 ||
			fail "$r steps/s"
		# a group of one: its mean is the run's loss, no sd, no interval
		g=$(row c/compare_groups.csv group "$r/tiny")
		[ "$(field c/compare_groups.csv $g n)" = 1 ] || fail "$r n"
		[ "$(field c/compare_groups.csv $g loss_topk_mean)" = "$(field c/compare.csv $row loss_topk)" ] || fail "$r mean"
		[ -z "$(field c/compare_groups.csv $g loss_topk_sd)" ] || fail "$r has an sd"
	done
	grep "^| d/tiny | 1 |" c/compare.md | grep -q " ± - | - |" || fail "a lone run's sd and interval are not -"
	# the causal rule of the mod run: mean over layers 1, 3 of the last 3 of 24 steps
	row=$(row c/compare.csv run m/tiny)
	for col in precision recall causal_capacity; do
		want=$( (values m/tiny/run.h5 layer_stats/1/$col | tail -n 3
			values m/tiny/run.h5 layer_stats/3/$col | tail -n 3) | awk '{ s += $1 } END { printf "%.17g", s / NR }')
		close "$(field c/compare.csv $row $col)" "$want" 1e-9 || fail "mod $col $(field c/compare.csv $row $col) vs $want"
	done
	[ -z "$(field c/compare.csv "$(row c/compare.csv run d/tiny)" precision)" ] || fail "dense run has a precision"
	# the checkpoint is not needed
	mkdir -p n/tiny && cp m/tiny/run.h5 n/tiny/
	"$an" compare n/tiny/run.h5 >/dev/null || fail "compare without ckpt"
	[ "$(field n/tiny/compare.csv 1 params)" = "$(field c/compare.csv "$(row c/compare.csv run m/tiny)" params)" ] ||
		fail "params without the checkpoint differ"
	# the training FLOPs: what the run file counted, a capacity schedule's
	# fuller early steps included (they were priced at the target capacity)
	train s 'model.layers=(dense, mod) x 2' mod.capacity=0.25 mod.causal=threshold \
		mod.capacity_schedule=linear mod.schedule_steps=12
	"$an" compare s/tiny/run.h5 m/tiny/run.h5 --out cs >/dev/null || fail "compare with a schedule"
	for r in s m; do
		got=$(field cs/compare_groups.csv "$(row cs/compare_groups.csv group $r/tiny)" train_flops)
		want=$(values $r/tiny/run.h5 metrics/train_flops | tail -n 1)
		close "$got" "$want" 1e-9 || fail "$r: train FLOPs $got, the run file counted $want"
	done
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
		grep "^tiny,7,$l,mod,class," m/tiny/tokens.csv | cut -d, -f3-8 >got.txt
		cmp -s want.txt got.txt || fail "layer $l class counts: $(cat got.txt) vs $(cat want.txt)"
	done
	# --predicted: position i classed by the window's token i + 1
	"$an" tokens m/tiny/run.h5 --predicted --out pred >pred.txt || fail "tokens --predicted"
	grep -q "each position's class is that of the token it predicts" pred/tokens.md ||
		fail "--predicted does not say so"
	for l in 1 3; do
		values m/tiny/run.h5 routing/step_000024/layer_$l/selected >sel.txt
		awk -v S=$S -v l=$l 'NR == FNR { lab[NR - 1] = $1; next }
			{ k = FNR - 1; r = int(k / S); i = k % S; c = lab[r * (S + 1) + i + 1]; n[c]++; t[c] += $1 }
			END { split("easy medium hard filler", name, " ")
				for (c = 0; c < 4; c++) printf "%d,mod,class,%s,%d,%d\n", l, name[c + 1], n[c], t[c] }' \
			labels.txt sel.txt >want.txt
		grep "^tiny,7,$l,mod,class," pred/tokens.csv | cut -d, -f3-8 >got.txt
		cmp -s want.txt got.txt || fail "layer $l predicted-class counts: $(cat got.txt) vs $(cat want.txt)"
	done
	png pred/tokens.png 1100 450 450
	# the 95% Wilson interval of every row: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
	awk -F, 'NR > 1 { n = $7; k = $8; z = 1.959963984540054; p = k / n; d = 1 + z * z / n
		c = (p + z * z / (2 * n)) / d; h = z / d * sqrt(p * (1 - p) / n + z * z / (4 * n * n))
		lo = k == 0 ? 0 : c - h; hi = k == n ? 1 : c + h
		if ((lo - $10)^2 > 1e-18 || (hi - $11)^2 > 1e-18 || $10 > $9 || $11 < $9) { print; exit 1 } }' \
		m/tiny/tokens.csv || fail "Wilson intervals"
	grep -q "^| easy | [0-9]* | [0-9.]*% \[[0-9.]*, [0-9.]*\] |" m/tiny/tokens.md || fail "no interval in the class table"
	grep -q "^pooled," m/tiny/tokens.csv && fail "pooled rows for one run"
	echo "$out" | grep -q "| layer | H(took) | MI class |" || fail "no position/class statistic"
	echo "$out" | grep -q "degenerate" && fail "a learned router called degenerate"
	"$an" tokens m/tiny/run.h5 --all-steps --out all | grep -q "steps 12 to 24" || fail "--all-steps"
	# a capacity of 1 takes every position of every sequence
	train f 'model.layers=(dense, mod)' mod.capacity=1.0
	"$an" tokens f/tiny/run.h5 | grep -q "^layer 1: degenerate: selects the same positions in every sequence" ||
		fail "degenerate router not reported"
	;;
groups)
	# run files with known numbers (runfiles.h): a, b x 3 seeds, dense x 2, c alone
	"$write_runs" . known || fail "write_runs"
	out=$("$an" compare known --out g) || fail "compare of a folder"
	echo "$out"
	[ "$(wc -l <g/compare.csv)" -eq 10 ] || fail "compare.csv: not one row per run"
	[ "$(wc -l <g/compare_groups.csv)" -eq 5 ] || fail "compare_groups.csv: not one row per group"
	# the grid's keys and the seeds as columns
	head -n 1 g/compare.csv | grep -q "^group,model.layers,mod.capacity,mod.router,seed,init_seed,data_seed,run," ||
		fail "compare.csv header: $(head -n 1 g/compare.csv)"
	r=$(row g/compare.csv run a-s3)
	[ "$(field g/compare.csv $r group)" = a ] && [ "$(field g/compare.csv $r seed)" = 3 ] &&
		[ "$(field g/compare.csv $r init_seed)" = 33 ] && [ "$(field g/compare.csv $r data_seed)" = 3 ] ||
		fail "a-s3: group, seeds"
	[ "$(field g/compare.csv "$(row g/compare.csv run a-s2)" group)" = a ] || fail "layers written out split a"
	[ "$(field g/compare.csv "$(row g/compare.csv run dense-s1)" mod.capacity)" = - ] || fail "dense has a capacity"
	[ "$(field g/compare.csv "$(row g/compare.csv run c)" mod.router)" = random ] || fail "c's router"
	# group a: mean 1.6474, sd 0.0034044 (by hand), 95% interval mean -+ 4.302653 sd / sqrt(3)
	gc=g/compare_groups.csv
	a=$(row $gc group a) b=$(row $gc group b) c=$(row $gc group c) d=$(row $gc group dense)
	[ "$(field $gc $a n)" = 3 ] && [ "$(field $gc $b n)" = 3 ] && [ "$(field $gc $c n)" = 1 ] &&
		[ "$(field $gc $d n)" = 2 ] || fail "group sizes"
	close "$(field $gc $a loss_topk_mean)" 1.6474 1e-12 || fail "a mean"
	close "$(field $gc $a loss_topk_sd)" 0.0034044089061 1e-9 || fail "a sd"
	close "$(field $gc $a loss_topk_ci_lo)" 1.63894297945 1e-10 || fail "a interval"
	close "$(field $gc $a loss_topk_ci_hi)" 1.65585702055 1e-10 || fail "a interval"
	close "$(field $gc $a se_topk)" 0.002 1e-12 || fail "a standard error"
	# the default baseline is the group called dense; a against it: Welch's t, its
	# Welch-Satterthwaite df and p (p from integrating the t density, Python)
	[ "$(field $gc $a baseline)" = dense ] || fail "default baseline"
	close "$(field $gc $a diff_topk)" 0.0064 1e-9 || fail "a - dense"
	close "$(field $gc $a t_topk)" 2.9021038904714307 1e-9 || fail "a t"
	close "$(field $gc $a df_topk)" 2.794863193330692 1e-9 || fail "a df"
	close "$(field $gc $a p_topk)" 0.06797106399 1e-6 || fail "a p"
	# a lone run: its value, no spread, no interval, no test
	close "$(field $gc $c loss_topk_mean)" 1.7 1e-12 || fail "c mean"
	[ -z "$(field $gc $c loss_topk_sd)$(field $gc $c loss_topk_ci_lo)$(field $gc $c p_topk)" ] ||
		fail "c has a spread or a test"
	grep -q "^| c | 1 | .* | 1.7000 ± - | - | 0.0020 | +0.0590 | - |" g/compare.md || fail "c's row: $(grep '^| c ' g/compare.md)"
	grep -q "^| a | 3 | .* | 1.6474 ± 0.0034 | \[1.6389, 1.6559\] | 0.0020 | +0.0064 | 0.068 |" g/compare.md ||
		fail "a's row: $(grep '^| a ' g/compare.md)"
	grep -q "Welch's two-sided t-test" g/compare.md || fail "the test is not named"
	# power: a's +0.0064 at a pooled sd of 0.0026 (effect 2.46) needs 4 seeds a
	# side (the exact noncentral t by simulation: power 0.62 at 3, 0.83 at 4)
	[ "$(field $gc $a seeds_for_80pct_power)" = 4 ] || fail "a's seeds for 80% power"
	[ -z "$(field $gc $c seeds_for_80pct_power)$(field $gc $d seeds_for_80pct_power)" ] ||
		fail "a power without a test"
	grep -q "^Power: .* a 4 (Δ +0.0064, pooled sd 0.0026); b 3 (Δ +0.0126, pooled sd 0.0026)\.$" g/compare.md ||
		fail "the power line: $(grep '^Power' g/compare.md)"
	# another baseline: b against a, p = 0.0892005 (the same reference)
	"$an" compare known --out h --baseline a >/dev/null || fail "--baseline a"
	close "$(field h/compare_groups.csv "$(row h/compare_groups.csv group b)" p_topk)" 0.08920052236 1e-6 ||
		fail "b against a"
	grep -q "^| a | 3 | .* | baseline |" h/compare.md || fail "the baseline's row"
	"$an" compare known --baseline nosuch >out.txt 2>err.txt && fail "an unknown baseline accepted"
	grep -q "baseline nosuch: no such group (the groups: a, b, c, dense)" err.txt || fail "$(cat err.txt)"
	# curves: one colour per group, 4 groups and 3 more legend items in 2 rows
	"$an" curves known --out g | grep -q "^wrote g/curves.png$" || fail "curves of a folder"
	png g/curves.png 1340 464 464
	# tokens over the replicates of a: class 1 taken in 1, 2, 3 of 4 windows:
	# pooled 12 of 24 (Wilson 0.3143 to 0.6857), replicates 0.25, 0.5, 0.75 (sd 0.25)
	"$an" tokens known/a-s1/run.h5 known/a-s2/run.h5 known/a-s3/run.h5 --out t >t.txt || fail "tokens of replicates"
	grep -q "^3 replicates pooled: a-s1, a-s2, a-s3" t.txt || fail "replicates not named"
	r=$(grep -n '^pooled,,1,mod,class,medium,' t/tokens.csv | cut -d: -f1)
	[ -n "$r" ] || fail "no pooled row"
	r=$((r - 1))
	[ "$(field t/tokens.csv $r tokens)" = 24 ] && [ "$(field t/tokens.csv $r took)" = 12 ] || fail "pooled counts"
	close "$(field t/tokens.csv $r wilson_lo)" 0.31427425819573 1e-10 || fail "pooled Wilson"
	close "$(field t/tokens.csv $r replicate_mean)" 0.5 1e-12 || fail "replicate mean"
	close "$(field t/tokens.csv $r replicate_sd)" 0.25 1e-12 || fail "replicate sd"
	grep -q "^| medium | 8 | 50.0% \[31.4, 68.6\]; 50.0 ± 25.0 |" t/tokens.md || fail "the class table: $(grep medium t/tokens.md)"
	png t/tokens.png 1100 450 450
	"$an" tokens known/a-s1/run.h5 known/b-s1/run.h5 >out.txt 2>err.txt
	[ $? -eq 2 ] || fail "tokens of two configs"
	grep -q "not replicates of one config (mod.capacity: 0.25 against 0.5)" err.txt || fail "$(cat err.txt)"
	# the report: groups, the sweep figure of mod.capacity, curves; per routed group
	# (a, b, c) heatmap, weights, routing analytics, compute per token and tokens:
	# 17 images
	"$an" report known --out rep >rep.txt || fail "report: $(cat rep.txt)"
	grep -q "9 runs in 4 groups" rep.txt || fail "report summary: $(cat rep.txt)"
	n=$(grep -o 'src="data:image/png;base64,' rep/report.html | wc -l)
	[ "$n" -eq 17 ] || fail "$n inline images, expected 17"
	for f in compare_groups.csv sweep_mod.capacity.png a/tokens.png a/heatmap_step20_seq0.png \
		a/routing.png; do
		[ -s rep/report/$f ] || fail "report/$f missing"
	done
	grep -q 'id="group-a"' rep/report.html || fail "no section of group a"
	grep -q "3 replicates pooled" rep/report/a/tokens.md || fail "the report's tokens are not over the replicates"
	;;
sweep)
	"$write_runs" . known || fail "write_runs"
	out=$("$an" sweep known --key mod.capacity --out s) || fail "sweep"
	echo "$out"
	for f in sweep_mod.capacity.md sweep_mod.capacity.csv sweep_mod.capacity.png; do
		echo "$out" | grep -q "^wrote s/$f$" || fail "$f not written"
	done
	png s/sweep_mod.capacity.png 820 584 584 # 3 legend items in 2 columns
	sc=s/sweep_mod.capacity.csv
	[ "$(wc -l <$sc)" -eq 5 ] || fail "sweep csv rows"
	# on the axis: a and b (learned), c (random); dense is a band (the key does not apply)
	for g in a:0.25:learned b:0.5:learned c:0.25:random; do
		set -- $(echo "$g" | tr ':' ' ')
		r=$(row $sc group "$1")
		[ "$(field $sc $r value)" = "$2" ] || fail "$1's value"
		[ "$(field $sc $r series)" = "mod.router = $3" ] || fail "$1's series: $(field $sc $r series)"
	done
	r=$(row $sc group dense)
	[ -z "$(field $sc $r value)" ] || fail "dense on the axis"
	close "$(field $sc "$(row $sc group b)" loss_topk_ci_hi)" 1.6619036538998 1e-10 || fail "b's interval"
	grep -q "^| - | (the key does not apply) | dense | 2 |" s/sweep_mod.capacity.md || fail "dense's row"
	expect() { # code message command...
		code=$1 msg=$2
		shift 2
		"$@" >out.txt 2>err.txt
		rc=$?
		[ "$rc" -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat err.txt)"
		grep -q -- "$msg" err.txt || fail "$* said: $(cat err.txt); expected: $msg"
	}
	expect 1 "mod.router: group a has the value 'learned', not a number" "$an" sweep known --key mod.router
	expect 1 "no such config key" "$an" sweep known --key mod.nope
	expect 1 "run.steps: takes one value across the runs" "$an" sweep known --key run.steps
	expect 2 "--key SECTION.KEY is required" "$an" sweep known
	expect 2 "--key capacity: expected SECTION.KEY" "$an" sweep known --key capacity
	;;
huge)
	# d_model 8192, 64 layers, 64 experts: 1.14e12 parameters (4.6 TB in fp32), never
	# allocated; s1 is an older run file without /model (counted from the kind table),
	# s2 has the records.  Peak RSS under 60 MiB: about 15 MiB is the program and its
	# libraries (HDF5, cairo, OpenBLAS, MPI) mapped in, the rest a figure's pixels
	# and HDF5's caches; one 8192 x 8192 float matrix alone is 256 MiB, so a model
	# or any of its tensors allocated would exceed it many times over.
	"$write_runs" . huge || fail "write_runs"
	for c in compare isoflop; do
		/usr/bin/time -f %M -o rss.txt "$an" $c huge --out $c >out.txt 2>err.txt ||
			fail "$c of the huge config: $(cat err.txt)"
		rss=$(tail -n 1 rss.txt)
		echo "$c: peak RSS $rss KiB"
		[ "$rss" -lt $((60 * 1024)) ] || fail "$c: peak RSS $rss KiB"
	done
	# parameters by hand: V d + d + 32 dense layers (2d + 4d^2 + 3 d f) + 32 moe layers
	# (2d + 4d^2 + d E + 3 E d f), d = 8192, f = 22016, E = 64, V = 256
	want=$(awk 'BEGIN { d = 8192; f = 22016; E = 64; V = 256
		printf "%.0f", V * d + d + 32 * (2 * d + 4 * d * d + 3 * d * f) + 32 * (2 * d + 4 * d * d + d * E + 3 * E * d * f) }')
	[ "$want" = 1142615449600 ] || fail "awk: $want"
	cc=compare/compare.csv
	r1=$(row $cc run iso-1e21-d8192x64-moe-s1) r2=$(row $cc run iso-1e21-d8192x64-moe-s2)
	[ "$(field $cc $r1 params)" = "$want" ] && [ "$(field $cc $r2 params)" = "$want" ] ||
		fail "params $(field $cc $r1 params), $(field $cc $r2 params), expected $want"
	[ "$(field $cc $r1 params_from)" = config ] && [ "$(field $cc $r2 params_from)" = record ] || fail "params_from"
	[ "$(field $cc $r1 flops_per_seq)" = "$(field $cc $r2 flops_per_seq)" ] || fail "counted and recorded FLOPs differ"
	[ "$(field $cc $r1 complete)" = 1 ] || fail "the budget's planned steps differ"
	# one group of two replicates; isoflop: one budget, one size, two seeds
	[ "$(wc -l <compare/compare_groups.csv)" -eq 2 ] || fail "the two seeds are not one group"
	ic=isoflop/isoflop.csv
	[ "$(field $ic 1 kind)" = moe ] && [ "$(field $ic 1 seeds)" = 2 ] && [ "$(field $ic 1 sizes)" = 1 ] ||
		fail "isoflop.csv: $(cat $ic)"
	[ "$(field $ic 1 best_params)" = "$want" ] || fail "isoflop params"
	;;
isoflop)
	# an isoFLOP study with known optima (runfiles.h): 3 sizes x dense, mod x 3 seeds,
	# seed s's optimum loss 1.50 + 0.01 s (+ 0.02 for mod), its ln N* the middle + 0.1 (s - 2)
	"$write_runs" . iso || fail "write_runs"
	"$an" isoflop iso --out i >out.txt || fail "isoflop: $(cat out.txt)"
	cat out.txt
	ic=i/isoflop.csv
	[ "$(wc -l <$ic)" -eq 3 ] || fail "isoflop.csv rows"
	d=$(row $ic kind dense) m=$(row $ic kind mod)
	for r in $d $m; do
		[ "$(field $ic $r sizes)" = 3 ] && [ "$(field $ic $r seeds)" = 3 ] &&
			[ "$(field $ic $r fit)" = parabola ] && [ "$(field $ic $r fit_sizes)" = 3 ] ||
			fail "row $r: sizes, seeds, fit"
		# the seeds' optima: sd 0.01 of loss*, 0.1 / ln 10 of log10 N*, interval -+ t(0.975, 2) 0.01 / sqrt 3
		close "$(field $ic $r seed_loss_opt_sd)" 0.01 1e-9 || fail "loss* sd"
		close "$(field $ic $r seed_log10_n_opt_sd)" 0.04342944819 1e-8 || fail "log10 N* sd"
		close "$(field $ic $r seed_loss_opt_ci_hi)" "$(awk -v m="$(field $ic $r seed_loss_opt_mean)" \
			'BEGIN { printf "%.12f", m + 0.024841377118 }')" 1e-9 || fail "loss* interval"
	done
	close "$(field $ic $d seed_loss_opt_mean)" 1.52 1e-9 || fail "dense seeds' loss*"
	close "$(field $ic $m seed_loss_opt_mean)" 1.54 1e-9 || fail "mod seeds' loss*"
	# through the means: the mean of parabolas of one curvature, whose vertex is at the
	# seeds' mean ln N* and lies 0.5 var(ln N*_s) = 0.5 (0.02 / 3) above the seeds' mean loss*
	close "$(field $ic $d loss_opt)" 1.523333333333 1e-9 || fail "dense loss*"
	close "$(field $ic $m loss_minus_dense)" 0.02 1e-9 || fail "mod - dense"
	# Welch: t = 0.02 / sqrt(2 x 0.01^2 / 3), 4 df; p from t(4)'s closed-form CDF
	close "$(field $ic $m p_vs_dense)" 0.07048399691 1e-8 || fail "p against dense"
	nd=$(field $ic $d n_opt)
	awk -v n="$nd" -v lo="$(field $ic $d seed_n_opt_lo)" -v hi="$(field $ic $d seed_n_opt_hi)" \
		'BEGIN { exit !(lo < n && n < hi && (hi / lo - exp(0.2)) ^ 2 < 1e-18) }' || fail "N* of the seeds"
	[ "$(wc -l <i/isoflop_runs.csv)" -eq 19 ] || fail "isoflop_runs.csv rows"
	# the kind comes from before -s<seed>
	grep -q "^iso-1e9-d16x2-mod-s2,iso-1e9-d16x2-mod,2,1000000000,mod," i/isoflop_runs.csv || fail "kind and seed of a run"
	grep -q "^| iso-1e9-d24x2-dense | 1e9 | dense | .* | 3 of 3 | " i/isoflop.md || fail "sizes table"
	png i/isoflop.png 1220 560 600
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
	expect 2 "--seq is not an option of tokens, which would ignore it; tokens takes --step" \
		"$an" tokens m/tiny/run.h5 --seq 1
	expect 2 "one file too many: heatmap takes at most 1" "$an" heatmap m/tiny/run.h5 m/tiny/run.h5
	expect 2 "0 files given, compare takes at least 1" "$an" compare
	expect 2 "--out needs a value" "$an" compare m/tiny/run.h5 --out
	expect 2 "--fit-sizes 2: expected a number of sizes (3 or more) or all" \
		"$an" isoflop m --fit-sizes 2
	expect 2 "--fit-sizes is not an option of compare" "$an" compare m/tiny/run.h5 --fit-sizes 5
	"$an" nonsense >out.txt 2>&1; [ $? -eq 2 ] || fail "unknown command exit code"
	"$an" >out.txt 2>&1; [ $? -eq 2 ] || fail "no command exit code"
	for c in heatmap weights curves compare sweep tokens isoflop report; do
		"$an" $c --help | grep -q "^usage: mode-analyze $c" || fail "$c --help"
	done
	"$an" --help | grep -q "^usage: mode-analyze COMMAND" || fail "--help"
	# nothing was written by the refused commands
	# (the training's own: checkpoint, run file, TensorBoard events)
	for r in m/tiny d/tiny; do
		[ "$(ls $r | grep -v '^events\.out\.tfevents\.' | sort | tr '\n' ' ')" = "ckpt.h5 run.h5 " ] ||
			fail "output left behind: $(ls $r)"
	done
	;;
ladder)
	# The dense-equivalent multiplier from run files with known numbers
	# (runfiles.h): dense on an exact line in log loss against log FLOPs at
	# three budgets, mod at the loss dense reaches with twice its FLOPs
	"$write_runs" . ladder || fail "write_runs ladder"
	"$an" compare ladder/dense ladder/mod --out both >both.txt || fail "compare with its ladder"
	grep -q "through 6 dense runs at 3 budgets" both/compare.md || fail "the ladder's legend"
	grep -q "^| mod-2e+09 | 2 | .* | 2.00 \[2.00, 2.00\] |" both/compare.md ||
		fail "mod's multiplier: $(grep '^| mod' both/compare.md)"
	grep -q "^| dense-4e+09 | 2 | .* | 1.00 \[1.00, 1.00\] |" both/compare.md ||
		fail "dense's own multiplier: $(grep '^| dense-4' both/compare.md)"
	r=$(grep -n '^mod-2e+09,' both/compare_groups.csv | cut -d: -f1)
	close "$(field both/compare_groups.csv $((r - 1)) dense_multiplier)" 2 1e-9 || fail "the CSV's multiplier"
	[ -z "$(field both/compare_groups.csv $((r - 1)) dense_multiplier_bound)" ] || fail "mod has a bound"
	# below every rung the table says "more than the largest rung's FLOPs over
	# the group's", above every rung "less than the smallest's", and not the
	# line's extrapolation (8 and 0.25 here; on a flat ladder, absurd values)
	# (one folder each: the two are one config, so one group together)
	"$an" compare ladder/dense ladder/far --out far >/dev/null || fail "compare below"
	"$an" compare ladder/dense ladder/short --out short >/dev/null || fail "compare above"
	f=$(($(grep -n '^far-2e+09,' far/compare_groups.csv | cut -d: -f1) - 1))
	s=$(($(grep -n '^short-2e+09,' short/compare_groups.csv | cut -d: -f1) - 1))
	close "$(field far/compare_groups.csv $f dense_multiplier)" 8 1e-9 || fail "far's line"
	[ "$(field far/compare_groups.csv $f dense_multiplier_extrapolated)" = 1 ] ||
		fail "far not extrapolated"
	fb=$(field far/compare_groups.csv $f dense_multiplier_bound)
	sb=$(field short/compare_groups.csv $s dense_multiplier_bound)
	case "$fb" in ">"*) ;; *) fail "far's bound: $fb" ;; esac
	case "$sb" in "<"*) ;; *) fail "short's bound: $sb" ;; esac
	# the largest rung (4e9) over far's FLOPs (2e9), the smallest (1e9) over short's
	close "${fb#>}" 2 0.05 || fail "far's bound $fb"
	close "${sb#<}" 0.5 0.05 || fail "short's bound $sb"
	grep -q "^| far-2e+09 | 2 | .* | > $(printf %.2f "${fb#>}") |" far/compare.md || fail "far's row: $(grep '^| far' far/compare.md)"
	grep -q "^| short-2e+09 | 2 | .* | < $(printf %.2f "${sb#<}") |" short/compare.md || fail "short's row: $(grep '^| short' short/compare.md)"
	grep -q "below every rung" far/compare.md || fail "the bound's legend"
	# --ladder: the ladder from another folder; without one, no column
	"$an" compare ladder/mod --ladder ladder/dense --out sep >/dev/null || fail "compare --ladder"
	grep -q "^| mod-2e+09 | 2 | .* | 2.00 \[2.00, 2.00\] |" sep/compare.md || fail "--ladder's multiplier"
	"$an" compare ladder/mod --out none >/dev/null || fail "compare without a ladder"
	grep -q "x dense FLOPs" none/compare.md && fail "a multiplier column without a ladder"
	"$an" compare ladder/mod --ladder ladder/mod >out.txt 2>err.txt && fail "a ladder of no dense run"
	grep -q "no dense ladder there" err.txt || fail "$(cat err.txt)"
	# --ladder adds its runs to the study's own dense ones: the study's
	# dense runs at 2e9 are the middle rung of a ladder whose ends lie
	# elsewhere (a fit through the ends alone is the same line here, so
	# the legend's count is what tells)
	mkdir -p split/study split/rungs
	cp -r ladder/mod/* ladder/dense/dense-2e+09-* split/study/
	cp -r ladder/dense/dense-1e+09-* ladder/dense/dense-4e+09-* split/rungs/
	"$an" compare split/study --ladder split/rungs --out split/o >/dev/null || fail "the split ladder"
	# a run that has just started (its header, no step yet) in a folder being
	# analysed is left out with a note, the rest analysed as without it
	"$write_runs" . started || fail "write_runs started"
	cp -r started/mod-started split/study/
	"$an" compare split/study --ladder split/rungs --out split/s >out.txt 2>err.txt ||
		fail "a folder with a started run: $(cat err.txt)"
	grep -q "mod-started/run.h5: no step recorded yet; left out" err.txt || fail "the note: $(cat err.txt)"
	grep -q "mod-started" split/s/compare.md && fail "the started run in the table"
	cmp -s split/o/compare.csv split/s/compare.csv || fail "the table changed by a started run"
	grep -q "through 6 dense runs at 3 budgets" split/o/compare.md ||
		fail "the study's own dense runs left out of --ladder's"
	grep -q "^| mod-2e+09 | 2 | .* | 2.00 \[2.00, 2.00\] |" split/o/compare.md ||
		fail "the split ladder's multiplier"
	# a ladder is one model: a dense run of another size is refused by name
	"$write_runs" . iso || fail "write_runs iso"
	mkdir -p mixed
	cp -r split/rungs/* iso/iso-1e9-d24x2-dense-s2 mixed/
	"$an" compare split/study --ladder mixed >out.txt 2>err.txt && fail "a ladder of two models"
	grep -q "the dense runs differ in their model: .* has 9296 parameters .*iso-1e9-d24x2-dense-s2/run.h5 17784" err.txt ||
		fail "$(cat err.txt)"
	;;
law)
	# The parametric law (Hoffmann et al.'s approach 3) of runs on a known
	# law (runfiles.h: E 1.2, A 40, alpha 0.35, B 20, beta 0.3) recovered,
	# and its optimum beside the parabolas' (the two approaches agree to 2%
	# on exact data); one budget alone gives no law
	"$write_runs" . law || fail "write_runs law"
	"$an" isoflop law --out lw >lw.txt || fail "isoflop of the law: $(cat lw.txt)"
	grep -q "^| dense | 24 | 1.2000 | 40 | 0.350 | 20 | 0.300 | " lw/isoflop.md ||
		fail "the law: $(grep '^| dense | 24' lw/isoflop.md)"
	[ "$(wc -l <lw/isoflop_law.csv)" -eq 4 ] || fail "isoflop_law.csv: $(cat lw/isoflop_law.csv)"
	for r in 1 2 3; do   # the budgets, ascending
		close "$(field lw/isoflop_law.csv $r budget)" "$(echo "$r" | awk '{ print 1e9 * 2 ^ ($1 - 1) }')" 1e-12 ||
			fail "row $r's budget"
		n3=$(field lw/isoflop_law.csv $r n_opt)
		close "$n3" "$(field lw/isoflop_law.csv $r parabola_n_opt)" 0.02 ||
			fail "approach 3's N* $n3 in row $r"
	done
	# N*(C) and L*(C) as curves (41 budgets from half the smallest to twice
	# the largest, log spaced: the sampled budgets are rows 11, 21, 31) with
	# the bootstrap's intervals around them, and their figure
	[ "$(wc -l <lw/isoflop_law_curve.csv)" -eq 42 ] || fail "isoflop_law_curve.csv: $(head -3 lw/isoflop_law_curve.csv)"
	for r in 1 2 3; do
		c=$((r * 10 + 1))
		close "$(field lw/isoflop_law_curve.csv $c budget)" "$(field lw/isoflop_law.csv $r budget)" 1e-9 ||
			fail "curve row $c's budget"
		for v in n_opt loss_opt; do
			close "$(field lw/isoflop_law_curve.csv $c $v)" "$(field lw/isoflop_law.csv $r $v)" 1e-6 ||
				fail "the curve's $v at budget $r"
		done
	done
	# (on exact data every refit finds one law and the interval has no
	# width: the full fit, from the grid, and the refits, from it, stop
	# within 1e-13 of each other, and N*, the minimum of a flat curve, is
	# located to the square root of rounding: 1e-6 of slack)
	awk -F, 'function le(a, b) { return a <= b + 1e-6 * (a < 0 ? -a : a) }
		NR > 1 && !(le($4, $3) && le($3, $5) && le($7, $6) && le($6, $8)) { exit 1 }' lw/isoflop_law_curve.csv ||
		fail "a curve point outside its interval"
	png lw/isoflop_law.png 1220 520 600
	# the 4e9 runs stopped half-way: the law of the other two budgets
	# predicts that budget's N* (exact data: as the three budgets' law
	# does, to 1%), and with no parabola there "agree" is "-", not "no"
	"$write_runs" . law-partial || fail "write_runs law-partial"
	"$an" isoflop lawp --out lp >lp.txt 2>&1 || fail "isoflop of a budget unfinished: $(cat lp.txt)"
	grep -q "left out: law-4e+09-d16-s1 (incomplete" lp.txt || fail "the unfinished runs: $(cat lp.txt)"
	close "$(field lp/isoflop_law.csv 3 n_opt)" "$(field lw/isoflop_law.csv 3 n_opt)" 0.01 ||
		fail "the two budgets' law at 4e9: $(field lp/isoflop_law.csv 3 n_opt)"
	grep -q '^| 4e9 | dense | [0-9.]*k | \[.*\] | - | - | - |$' lp/isoflop.md ||
		fail "agree at a budget without a parabola: $(grep '^| 4e9 | dense | [0-9.]*k' lp/isoflop.md)"
	mkdir -p one
	cp -r law/law-1e+09-* one/
	"$an" isoflop one --out on >/dev/null || fail "isoflop of one budget"
	grep -q "^| dense | 8 | no fit (it needs 5 usable runs or more at two budgets" on/isoflop.md ||
		fail "a law from one budget"
	;;
routing)
	# The routing analytics of an expert and a depth-routed run: the tables
	# and the figure; the expert x class matrix holds every first choice
	train_moe
	"$an" routing e/tiny/run.h5 --out r >r.txt || fail "routing: $(cat r.txt)"
	grep -q "^| 1 | staged | 4 | " r/routing.md || fail "staged's load row"
	grep -q "^| 3 | integrated | 4 | " r/routing.md || fail "integrated's load row"
	grep -q "Compute per token: how many of the 2 routed layers" r/routing.md || fail "blocks taken"
	grep -q "^maxvio,1," r/routing.csv || fail "MaxVio over training"
	blocks=$(awk -F, '$1 == "blocks_taken" { s += $5 } END { print s }' r/routing.csv)
	[ "$blocks" -eq $((32 * 32)) ] || fail "blocks taken cover $blocks tokens, not 1024"
	png r/routing.png 920 644 644
	;;
depth)
	# Compute per token with known answers: a model of (dense, exit, dense,
	# mor) evaluated with the exit's threshold at 2 (max p never passes it:
	# every token runs both dense layers and the recursions mor kept it for,
	# S + floor(2S/3) + floor(S/3) of a sequence of S = 32 under the linear
	# schedule) and at 0 (max p always passes: every token leaves at layer 1
	# after one block)
	train x 'model.layers=dense, exit, dense, mor' mor.recursions=3 exit.threshold=2
	"$exe" eval x/tiny/ckpt.h5 --mode topk --windows 16 --record none.h5 >/dev/null ||
		fail "eval --record"
	"$an" depth none.h5 --out n >n.txt || fail "depth: $(cat n.txt)"
	total=$(awk -F, '$1 == "depth_tokens" { s += $2 * $5 } END { print s }' n/depth.csv)
	[ "$total" -eq $((16 * (2 * 32 + 32 + 21 + 10))) ] || fail "depths sum to $total: $(cat n/depth.md)"
	grep -q "at most 5;" n/depth.md || fail "the most blocks: $(cat n/depth.md)"
	png n/depth.png 920 344 344
	"$exe" eval x/tiny/ckpt.h5 --mode topk --windows 16 --record all.h5 exit.threshold=0 \
		>/dev/null || fail "eval --record exit.threshold=0"
	"$an" depth all.h5 --out a >a.txt || fail "depth: $(cat a.txt)"
	grep -q "^depth_tokens,1,,512,512$" a/depth.csv || fail "every token at depth 1: $(cat a/depth.md)"
	grep -q "left at layer 1" a/depth.md || fail "the exit point's column"
	awk -F, '$1 == "exit_share_class" && $5 != 1 { bad = 1 } END { exit bad }' a/depth.csv ||
		fail "a class that did not all leave: $(cat a/depth.md)"
	# tokens counts an exit point's `exited` as its take: every token at
	# threshold 0, none at 2 (the report ran tokens on exit models and
	# failed: no routed layer had a record)
	"$an" tokens all.h5 --out ta >/dev/null || fail "tokens of an exit model"
	took() { awk -F, '$3 == 1 && $4 == "exit" && $5 == "class" { n += $7; t += $8 } END { print n, t }' "$1"; }
	[ "$(took ta/tokens.csv)" = "512 512" ] || fail "exit 0: $(took ta/tokens.csv)"
	"$an" tokens none.h5 --out tn >/dev/null || fail "tokens of an exit model"
	[ "$(took tn/tokens.csv)" = "512 0" ] || fail "exit 2: $(took tn/tokens.csv)"
	"$an" depth x/tiny/run.h5 --out r >/dev/null || fail "depth of the run's own records"
	# the heatmap shows where tokens left: at threshold 0 the exit's row is
	# all "left here" (#d55e00) and the two rows after it "left earlier"
	# (#f7e3d4), one cell a position, one box more in the legend; at 2 none
	fills() { grep -o "fill:rgb($2)" "$1" | wc -l; }
	exit_c='83\.52[0-9]*%,36\.86[0-9]*%,0%' gone_c='96\.86[0-9]*%,89\.01[0-9]*%,83\.13[0-9]*%'
	"$an" heatmap all.h5 --svg --out ha >/dev/null || fail "heatmap of an exit model"
	[ "$(fills ha/heatmap_step*_seq0.svg "$exit_c")" -eq 33 ] && [ "$(fills ha/heatmap_step*_seq0.svg "$gone_c")" -eq 65 ] ||
		fail "exit 0's heatmap: $(fills ha/heatmap_step*_seq0.svg "$exit_c") left, $(fills ha/heatmap_step*_seq0.svg "$gone_c") gone"
	"$an" heatmap none.h5 --svg --out hn >/dev/null || fail "heatmap of an exit model"
	[ "$(fills hn/heatmap_step*_seq0.svg "$exit_c")" -eq 0 ] && [ "$(fills hn/heatmap_step*_seq0.svg "$gone_c")" -eq 0 ] ||
		fail "exit 2's heatmap shows tokens leaving"
	# and mor's row one band a recursion, filled where it ran: 32 + 21 + 10
	# of the 96 (the sum of depths above), and the legend's box of each
	taken_c='22\.74[0-9]*%,35\.68[0-9]*%,62\.74[0-9]*%' skipped_c='93\.33[0-9]*%,94\.11[0-9]*%,95\.68[0-9]*%'
	[ "$(fills hn/heatmap_step*_seq0.svg "$taken_c")" -eq 64 ] && [ "$(fills hn/heatmap_step*_seq0.svg "$skipped_c")" -eq 34 ] ||
		fail "mor's recursions in the heatmap: $(fills hn/heatmap_step*_seq0.svg "$taken_c") ran, $(fills hn/heatmap_step*_seq0.svg "$skipped_c") not"
	;;
cluster)
	# run files with known per-step compute_s, comm_s, comm_bytes (runfiles.h)
	"$write_runs" w cluster || fail "write_runs cluster"
	c=w/cluster
	net="--cores-per-node 2 --link-gbit 1 --latency-us 10 --nodes 1,4"
	"$an" cluster $c/c-p1/run.h5 $c/c-p2/run.h5 $net --sweep 5,1e10 --out o2 >o2.txt ||
		fail "cluster: $(cat o2.txt)"
	cat o2.txt
	grep -q "t(P) = t(P0) P0 / (P e)" o2.txt || fail "two rank counts: the eff form expected"
	# by hand: e = 0.8 / (2 x 0.5) = 0.8; K = 1e6 / (2 x 1/2) = 1e6 bytes; within a
	# node 1e6 / 0.1 s = 1e7 B/s.  1 node of 2: compute 0.8 / (2 x 0.8) = 0.5 s,
	# comm 2 (1/2) 1e6 / 1e7 = 0.1 s, step 0.6, efficiency 0.8 / (2 x 0.6).
	# 4 nodes (8 ranks, batch 4 raised to 8): compute 0.8 / (4 x 0.8) = 0.25,
	# comm 0.1 + 2 (3/4) 1e6 / 1.25e8 + 2 x 3 x 10e-6 = 0.11206,
	# efficiency 0.8 x 2 / (8 x 0.36206).
	f=o2/cluster.csv
	r=$(row $f nodes 4)
	for want in "1 compute_s 0.5" "1 comm_s 0.1" "1 step_s 0.6" "1 efficiency 0.666667" \
		"$r compute_s 0.25" "$r comm_s 0.11206" "$r step_s 0.36206" "$r batch 8" \
		"$r efficiency $(awk 'BEGIN { print 1.6 / (8 * 0.36206) }')"; do
		set -- $want
		got=$(field $f "$1" "$2")
		close "$got" "$3" 1e-5 || fail "cluster.csv row $1 $2: $got, expected $3"
	done
	# the scaled model: compute and bytes x 1e8 / its parameters, efficiency
	# at 1 node unchanged (no latency there)
	r=$(row $f model scaled)
	close "$(field $f "$r" efficiency)" 0.666667 1e-5 || fail "scaled efficiency"
	# the sweep: 10 steps a run; 1 rank a run 0.8 s a step, 8 s a run, 5 runs on
	# 2 groups: 24 s; 2 ranks 0.6 s a step, 6 s, 1 group: 30 s; 4 nodes: 8 groups
	# 8 s, 4 groups 12 s
	for want in "sweep-k1 1 24" "sweep-k2 1 30" "sweep-k1 4 8" "sweep-k2 4 12"; do
		set -- $want
		got=$(awk -F, -v m="$1" -v n="$2" '$1 == m && $3 == n { print $8 }' $f)
		close "${got:-nan}" "$3" 1e-9 || fail "sweep $1 at $2 nodes: $got, expected $3"
	done
	# runs of two sizes: 2 of 20 steps, 3 of 10; 1 rank a run: 16, 16, 8, 8, 8 s
	# longest first onto 2 groups: 16 + 8 + 8 = 32 s; 2 ranks a run, 1 group:
	# 0.6 x 70 = 42 s; 4 nodes at 1 rank a run (8 groups): the longest, 16 s
	"$an" cluster $c/c-p1/run.h5 $c/c-p2/run.h5 $net --sweep 2,2e10+3,1e10 --out o4 >o4.txt ||
		fail "cluster --sweep of two sizes: $(cat o4.txt)"
	grep -q "Sweep of 5 runs, 7e+10 training FLOPs in all (2 of 2e+10, 3 of 1e+10)" o4.txt ||
		fail "the sweep's heading: $(cat o4.txt)"
	for want in "sweep-k1 1 32" "sweep-k2 1 42" "sweep-k1 4 16"; do
		set -- $want
		got=$(awk -F, -v m="$1" -v n="$2" '$1 == m && $3 == n { print $8 }' o4/cluster.csv)
		close "${got:-nan}" "$3" 1e-9 || fail "sweep of two sizes, $1 at $2 nodes: $got, expected $3"
	done
	[ -s o2/cluster.md ] && grep -q "^Assumptions: nodes of 2 ranks" o2/cluster.md ||
		fail "cluster.md or its assumptions missing"
	# three rank counts where a + b/P fits exactly (0.2 + 0.6/P): that form;
	# at 4 nodes (per rank one sequence, P = 4) 0.2 + 0.15
	"$an" cluster $c/c-p1/run.h5 $c/c-p2/run.h5 $c/c-p4/run.h5 $net --out o3 >o3.txt ||
		fail "cluster of 3: $(cat o3.txt)"
	grep -q "Compute fit: t(P) = a + b/P" o3.txt || fail "3 rank counts: a + b/P expected"
	close "$(field o3/cluster.csv "$(row o3/cluster.csv nodes 4)" compute_s)" 0.35 1e-6 ||
		fail "a + b/P at 4 nodes"
	# experts: K = 4 bytes a parameter outside the experts (said in the
	# table), the rest of the 2-rank bytes 5e5 = alpha q (P-1)/P with q = 2:
	# alpha 5e5.  At 4 nodes (P 8, q 1, C 2): the all-reduce as above with K,
	# the all-to-alls' A = 5e5 x 7/8 bytes, 1/7 of them within the node at
	# bw, 6/7 through the node's link shared by 2 ranks, and 4 all-to-alls x
	# 3 other nodes x 10 us
	"$an" cluster $c/e-p1/run.h5 $c/e-p2/run.h5 $net --out o5 >o5.txt || fail "cluster moe: $(cat o5.txt)"
	grep -q "(data+expert parallelism)" o5.txt || fail "experts not seen: $(cat o5.txt)"
	grep -q "alpha = 5e+05 bytes a sequence" o5.txt || fail "alpha: $(cat o5.txt)"
	K=$(sed -n 's/^Bytes: K = \([^ ]*\) bytes all-reduced.*/\1/p' o5.txt)
	want=$(awk -v K="$K" 'BEGIN { bw = (K + 5e5) / 0.1; A = 5e5 * 7 / 8
		print K / bw + 1.5 * K / 1.25e8 + 6e-5 + A / 7 / bw + A * 6 / 7 * 2 / 1.25e8 + 12e-5 }')
	got=$(field o5/cluster.csv "$(row o5/cluster.csv nodes 4)" comm_s)
	close "$got" "$want" 1e-4 || fail "moe comm at 4 nodes: $got, expected $want (K $K)"
	close "$(field o5/cluster.csv 1 comm_s)" 0.1 1e-9 || fail "moe comm at 1 node"
	# refused: one rank count only (one run; two replicates at 2 ranks), runs of
	# different configs, a bad option value
	expect 1 "every run given trained on 2 ranks" "$an" cluster $c/c-p2/run.h5 --out x
	cp -r $c/c-p2 $c/c-p2b
	expect 1 "two rank counts or more" "$an" cluster $c/c-p2/run.h5 $c/c-p2b/run.h5 --out x
	expect 1 "different configs (model.d_model: 32 against 48)" \
		"$an" cluster $c/c-p1/run.h5 $c/o-p2/run.h5 --out x
	expect 2 "--nodes 4,2: expected node counts" "$an" cluster $c --nodes 4,2 --out x
	expect 2 "--sweep 5: expected N,F" "$an" cluster $c/c-p1/run.h5 $c/c-p2/run.h5 --sweep 5
	expect 2 "--sweep 5,1e9+: a trailing +" "$an" cluster $c --sweep 5,1e9+
	expect 2 "--link-gbit 0: expected a bandwidth" "$an" cluster $c --link-gbit 0
	expect 2 "--step is not an option of cluster" "$an" cluster $c --step 3
	[ -e x ] && fail "a refused model left its output folder"
	# two tiny runs trained here at 1 and 2 ranks: provenance/ranks and the
	# bytes the trainer counted are read
	train t1 run.steps=6
	mpirun -n 2 "$exe" "$config" run.out=t2 --quiet run.steps=6 || fail "training at 2 ranks"
	"$an" cluster t1/tiny/run.h5 t2/tiny/run.h5 --out tt >tt.txt || fail "cluster: $(cat tt.txt)"
	grep -q "^| 2 | 1 | " tt.txt || fail "no 2-rank point: $(cat tt.txt)"
	b=$(grep "^| 2 | 1 | " tt.txt | awk -F'|' '{ print $6 }')
	close "$b" 0 0 && fail "the 2-rank run sent no bytes"
	# and of experts: the all-to-alls' bytes beyond the all-reduce
	train e1 run.steps=6 'model.layers=dense, moe' moe.experts=2
	mpirun -n 2 "$exe" "$config" run.out=e2 --quiet run.steps=6 'model.layers=dense, moe' \
		moe.experts=2 || fail "training experts at 2 ranks"
	"$an" cluster e1/tiny/run.h5 e2/tiny/run.h5 --out te >te.txt || fail "cluster: $(cat te.txt)"
	grep -q "(data+expert parallelism)" te.txt || fail "experts not seen: $(cat te.txt)"
	alpha=$(sed -n 's/.*alpha = \([^ ]*\) bytes.*/\1/p' te.txt)
	awk -v a="$alpha" 'BEGIN { exit !(a > 0) }' || fail "no all-to-all bytes: $(cat te.txt)"
	;;
counterfactual)
	# eval --routing's and --dial's tables drawn; two checkpoints' records
	# compared token by token (a run against itself: no difference at all)
	train_mod
	"$exe" eval m/tiny/ckpt.h5 --mode topk --windows 24 --routing random,bottom,shuffle \
		--csv cf.csv --record a.h5 >cf.txt || fail "eval --routing: $(cat cf.txt)"
	"$an" counterfactual cf.csv --out f >/dev/null || fail "counterfactual"
	png f/counterfactual.png 760 350 350
	# pooled over replicates: tables with known differences for two seeds
	# of one model (folders x-s1, x-s2) and one of another; the mean, sd,
	# interval and one-sample t over the seeds (t = 4 on 1 df: p 0.156)
	h=checkpoint,mode,policy,class,tokens,windows,loss,se,diff,diff_se,p,identical_windows,flops_per_token
	printf '%s\n%s\n%s\n' "$h" "o/x-s1/ckpt.h5,topk,learned,all,10,2,1.0,0.1,0,0,1,2,5" \
		"o/x-s1/ckpt.h5,topk,random,all,10,2,1.5,0.1,0.5,0.01,0.001,0,5" >p1.csv
	printf '%s\n%s\n' "$h" "o/x-s2/ckpt.h5,topk,random,all,10,2,1.3,0.1,0.3,0.03,0.2,0,5" >p2.csv
	printf '%s\n%s\n' "$h" "o/y-s1/ckpt.h5,topk,random,all,10,2,1.1,0.1,0.1,0.03,0.2,0,5" >p3.csv
	"$an" counterfactual p1.csv p2.csv p3.csv --out pool >/dev/null || fail "counterfactual pooled"
	grep -q "^| x | topk | random | all | 2 | 1.4000 | 0.4000 ± 0.1414 | \[-0.8706, 1.6706\] | 0.156 | 0.0200 | 1/2 |$" \
		pool/counterfactual.md || fail "x pooled: $(grep '^| x' pool/counterfactual.md)"
	grep -q "^| y | topk | random | all | 1 | 1.1000 | 0.1000 ± - | - | - | 0.0300 | 0/1 |$" \
		pool/counterfactual.md || fail "y alone: $(grep '^| y' pool/counterfactual.md)"
	[ "$(grep -c '^x,topk,random,all,2,' pool/counterfactual.csv)" = 1 ] || fail "the pooled CSV"
	"$exe" eval m/tiny/ckpt.h5 --windows 24 --dial mod.causal_threshold=-1,0,1 --csv dial.csv \
		>/dev/null || fail "eval --dial"
	[ "$(wc -l <dial.csv)" -eq 4 ] || fail "dial.csv: $(cat dial.csv)"
	"$an" dial dial.csv --out f >/dev/null || fail "dial"
	png f/dial.png 740 500 500
	"$exe" eval m/tiny/ckpt.h5 --mode topk --windows 24 --record b.h5 >/dev/null || fail "record b"
	"$an" lossdiff a.h5 b.h5 --out f >ld.txt || fail "lossdiff: $(cat ld.txt)"
	grep -q "^| all | 768 | .* | +0.0000 | 0.0000 |" f/lossdiff.md || fail "a run against itself"
	png f/lossdiff.png 780 640 640
	# pooled over pairs: (a, d) and (a, a), d the same checkpoint at another
	# capacity on the same windows: the pooled difference is half of (a, d)'s
	# and its one-sample t over the two pairs is 1 on 1 df (p 0.5 exactly)
	"$exe" eval m/tiny/ckpt.h5 mod.capacity=0.5 --mode topk --windows 24 --record d.h5 \
		>/dev/null || fail "record d"
	"$an" lossdiff a.h5 d.h5 --out g1 >/dev/null || fail "lossdiff a d"
	"$an" lossdiff a.h5 d.h5 a.h5 a.h5 --out g2 >/dev/null || fail "lossdiff pooled"
	one=$(awk -F, '$1 == "all" {print $6}' g1/lossdiff.csv)
	awk -F, -v one="$one" '$1 == "all" { d = $7 - one / 2; if (d < 0) d = -d
		exit !(one != 0 && $3 == 2 && d <= 1e-8 * (one < 0 ? -one : one) + 1e-12 && $11 == 0.5) }' \
		g2/lossdiff_pooled.csv || fail "pooled: $(head -2 g2/lossdiff_pooled.csv), one pair $one"
	grep -q "^# B - A pooled over 2 pairs" g2/lossdiff.md || fail "the pooled table first"
	[ "$(grep -c '^all,all,' g2/lossdiff.csv)" = 2 ] || fail "each pair's rows"
	png g2/lossdiff.png 780 640 640
	"$an" lossdiff a.h5 d.h5 a.h5 >out.txt 2>err.txt && fail "lossdiff of an odd count"
	grep -q "give pairs" err.txt || fail "$(cat err.txt)"
	"$an" routing a.h5 --out f >/dev/null || fail "routing analytics of an eval record"
	"$exe" eval m/tiny/ckpt.h5 --mode topk --windows 12 --record c.h5 >/dev/null || fail "record c"
	"$an" lossdiff a.h5 c.h5 >out.txt 2>err.txt && fail "lossdiff of other windows"
	grep -q "hold other windows" err.txt || fail "$(cat err.txt)"
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "ok: $test_name"
