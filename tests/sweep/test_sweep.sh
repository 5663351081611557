#!/bin/sh
# End-to-end tests of `mode-exp sweep` and of `mode-analyze isoflop` and
# `report` on tiny sweeps of the tiny config.
#   test_sweep.sh TEST MODE_EXP MODE_ANALYZE|none CONFIG COMPARE_RUNS
# TEST: grid | rerun | resume | errors | isoflop | report | examples | groups | groupfault |
#       slurm | evalcut
set -u
test_name=$1
examples=$(cd "$(dirname "$0")/../../experiments" && pwd)
abspath() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
exe=$(abspath "$2") config=$(abspath "$4") compare=$(abspath "$5")
an=none
[ "$3" != none ] && an=$(abspath "$3")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
cp "$config" tiny.ini

fail() { echo "FAIL: $*"; exit 1; }
needs_analyze() {
	if [ "$an" = none ]; then
		echo "SKIP: mode-analyze is not built (no cairo)"
		exit 77
	fi
	export MODE_ANALYZE="$an"
}
# values FILE DATASET: the dataset's values, one a line, full precision
values() { # RUN.h5 DATASET: a column, one value a line (a run in progress too)
	"$compare" --values "$1" "$2"
}
# the runs of the grid sweep, in the order it makes them
grid_runs="capacity-0.25 capacity-0.5 router-random dense"

write_grid() { # the tiny grid: 2 capacities, random routing, a dense baseline
	cat >grid.ini <<-'EOF'
	# a tiny grid sweep for the tests
	[sweep]
	base = tiny.ini
	out = out/grid

	[all]
	run.steps = 16                 ; every run
	run.eval_every = 8

	[grid]
	mod.capacity = 0.25, 0.5
	model.layers = (dense, mod) x 2

	[extra.router-random]
	model.layers = (dense, mod) x 2
	mod.router = random

	[extra.dense]
	EOF
}

write_iso() { # 2 budgets x 2 sizes x 2 kinds
	cat >iso.ini <<-'EOF'
	[sweep]
	base = tiny.ini
	out = out/iso
	[all]
	run.eval_every = 1000          ; only the last step evaluates
	[isoflop]
	budgets = 1e9, 2e9
	size = d_model=16 n_heads=2 d_ff=32 depth=2
	size = d_model=32 n_heads=2 d_ff=64 depth=2
	[kind.dense]
	pattern = dense
	[kind.mod]
	pattern = dense, mod
	mod.capacity = 0.25
	EOF
}

write_small() { # 4 tiny runs, two sizes (the queue puts d_model 32 first)
	cat >small.ini <<-'EOF'
	[sweep]
	base = tiny.ini
	out = out
	[all]
	run.steps = 12
	[grid]
	model.d_model = 16, 32
	optim.lr = 3e-3, 1e-3
	EOF
}

# mtimes of every run and checkpoint file, with nanoseconds
stamps() { find out -name '*.h5' | sort | xargs stat -c '%n %y'; }

case $test_name in
grid)
	write_grid
	"$exe" sweep grid.ini --dry-run >dry.txt || fail "dry run: $(cat dry.txt)"
	cat dry.txt
	grep -q "4 runs into out/grid/: 4 to train, 0 to resume, 0 complete" dry.txt || fail "dry-run header"
	[ -e out ] && fail "--dry-run created out/"
	"$exe" sweep grid.ini --no-report >run.txt 2>err.txt || fail "sweep: $(cat err.txt)"
	cat run.txt
	[ "$(grep -c ' trained ' run.txt)" -eq 4 ] || fail "expected 4 trained lines"
	for r in $grid_runs; do
		[ -s "out/grid/$r/run.h5" ] && [ -s "out/grid/$r/ckpt.h5" ] || fail "$r: no run.h5 and ckpt.h5"
		[ "$(values "out/grid/$r/run.h5" metrics/step | tail -n 1)" = 16 ] || fail "$r: not 16 steps"
		grep -q "\] $r  *trained  *16/16 steps  loss [0-9]" run.txt || fail "$r: no run line"
		# the resolved config is the base plus the sweep's settings
		h5dump -a config "out/grid/$r/run.h5" >cfg.txt || fail "$r: config attribute"
		grep -q "name = $r" cfg.txt && grep -q "out = out/grid" cfg.txt || fail "$r: name or out"
	done
	h5dump -a config out/grid/capacity-0.5/run.h5 | grep -q "capacity = 0.5" || fail "capacity 0.5 not set"
	h5dump -a config out/grid/router-random/run.h5 | grep -q "router = random" || fail "random not set"
	h5dump -a config out/grid/dense/run.h5 | grep -q "layers = dense x 2" || fail "dense not the base"
	# the last line says how the runs went, then how to make the report
	grep -q "^# 4 runs: 4 trained, 0 resumed, 0 skipped, 0 failed" run.txt || fail "summary line"
	MODE_ANALYZE=/nonexistent "$exe" sweep grid.ini >again.txt || fail "second sweep"
	grep -q "mode-analyze not found.*mode-analyze report out/grid" again.txt ||
		fail "no word on the missing mode-analyze: $(cat again.txt)"
	# under mpirun with 2 ranks a complete sweep is skipped as well
	if command -v mpirun >/dev/null; then
		mpirun -n 2 "$exe" sweep grid.ini --no-report >mpi.txt 2>&1 || fail "mpirun sweep: $(cat mpi.txt)"
		[ "$(grep -c ' skipped ' mpi.txt)" -eq 4 ] || fail "mpirun: not all skipped: $(cat mpi.txt)"
	fi
	;;
rerun)
	write_grid
	# a run that fails is reported, the others go on, the exit status says so
	MODE_FAULT=nan@3 "$exe" sweep grid.ini --no-report >fault.txt 2>&1
	[ $? -eq 1 ] || fail "failing runs: exit status $?"
	[ "$(grep -c ' failed: step 3: non-finite gradient' fault.txt)" -eq 4 ] || fail "$(cat fault.txt)"
	grep -q "^# 4 runs: 0 trained, 0 resumed, 0 skipped, 4 failed" fault.txt || fail "fault summary"
	# then they train from the start (no checkpoint was written)
	"$exe" sweep grid.ini --no-report >first.txt 2>&1 || fail "first sweep: $(cat first.txt)"
	[ "$(grep -c ' trained ' first.txt)" -eq 4 ] || fail "not all trained: $(cat first.txt)"
	stamps >before.txt
	sleep 1
	"$exe" sweep grid.ini --no-report >run.txt 2>&1 || fail "second sweep: $(cat run.txt)"
	cat run.txt
	[ "$(grep -c ' skipped ' run.txt)" -eq 4 ] || fail "expected 4 skipped lines"
	grep -q "0 to train, 0 to resume, 4 complete" run.txt || fail "header of the second sweep"
	stamps >after.txt
	cmp -s before.txt after.txt || fail "a skipped run's files changed: $(diff before.txt after.txt)"
	# without its run.h5 a run is trained again, alone
	final=$(values out/grid/capacity-0.5/run.h5 metrics/loss | tail -n 1)
	rm out/grid/capacity-0.5/run.h5
	"$exe" sweep grid.ini --no-report >run2.txt 2>&1 || fail "third sweep: $(cat run2.txt)"
	cat run2.txt
	grep -q "capacity-0.5  *trained  *16/16" run2.txt || fail "capacity-0.5 not trained again"
	[ "$(grep -c ' skipped ' run2.txt)" -eq 3 ] || fail "expected 3 skipped lines"
	stamps >after2.txt
	[ "$(diff before.txt after2.txt | grep -c '^<')" -eq 2 ] ||
		fail "other files changed: $(diff before.txt after2.txt)"
	# the same config and seed: the same losses
	[ "$(values out/grid/capacity-0.5/run.h5 metrics/loss | tail -n 1)" = "$final" ] ||
		fail "retrained run differs"
	;;
resume)
	write_grid
	"$exe" sweep grid.ini --no-report >/dev/null 2>&1 || fail "first sweep"
	want=$(values out/grid/capacity-0.25/run.h5 metrics/loss | tr '\n' ' ')
	# cut one run short: mode-exp itself, with the run's resolved config, 6 of 16 steps
	h5dump -a config out/grid/capacity-0.25/run.h5 >/dev/null || fail "h5dump"
	rm -r out/grid/capacity-0.25
	"$exe" tiny.ini run.steps=16 run.eval_every=8 mod.capacity=0.25 'model.layers=(dense, mod) x 2' \
		run.out=out/grid run.name=capacity-0.25 --max-steps 6 --quiet || fail "partial run"
	[ "$(values out/grid/capacity-0.25/run.h5 metrics/step | tail -n 1)" = 6 ] || fail "not 6 steps"
	"$exe" sweep grid.ini --no-report >run.txt 2>&1 || fail "resuming sweep: $(cat run.txt)"
	cat run.txt
	grep -q "1 to resume, 3 complete" run.txt || fail "header: 1 to resume"
	grep -q "capacity-0.25  *resumed  *16/16 steps" run.txt || fail "capacity-0.25 not resumed"
	[ "$(values out/grid/capacity-0.25/run.h5 metrics/loss | tr '\n' ' ')" = "$want" ] ||
		fail "the resumed run's losses differ from an uninterrupted run's"
	# a folder holding another config is refused before any work
	sed -i 's/^mod.capacity = 0.25, 0.5/mod.capacity = 0.25, 0.5\nmod.gate = raw/' grid.ini
	stamps >before.txt
	"$exe" sweep grid.ini --no-report >out.txt 2>err.txt && fail "a changed config was accepted"
	grep -q "out/grid/capacity-0.25/.*of another config" err.txt || fail "message: $(cat err.txt)"
	stamps >after.txt
	cmp -s before.txt after.txt || fail "files changed after the refusal"
	;;
errors)
	write_grid
	# expect CODE MESSAGE FILE: mode-exp sweep FILE exits CODE with one line holding MESSAGE,
	# before any run
	expect() {
		"$exe" sweep "$3" --no-report >out.txt 2>err.txt
		rc=$?
		[ "$rc" -eq "$1" ] || fail "$3 exited $rc, expected $1: $(cat err.txt)"
		grep -qF -- "$2" err.txt || fail "$3 said: $(cat err.txt); expected: $2"
		[ "$(wc -l <err.txt)" -eq 1 ] || fail "$3: more than one line: $(cat err.txt)"
		[ -e out ] && fail "$3: out/ was created"
		return 0
	}
	# a bad value in the grid stops the sweep at its line, whichever run holds it
	sed 's/^mod.capacity = 0.25, 0.5/mod.capacity = 0.25, 1.5/' grid.ini >bad.ini
	expect 2 "bad.ini:11: [mod] capacity = 1.5: expected" bad.ini
	grep -q "(run capacity-1.5)" err.txt || fail "the run is not named: $(cat err.txt)"
	sed 's/^mod.router = random/mod.router = sideways/' grid.ini >bad.ini
	expect 2 "bad.ini:16: [mod] router = sideways: expected one of learned, random" bad.ini
	sed 's/^run.eval_every = 8/run.eval_evry = 8/' grid.ini >bad.ini
	expect 2 "bad.ini:8: [run] eval_evry" bad.ini
	sed 's/^\[extra.dense\]/[extra.dense]\nmodel.layers = dense x 2, sideways/' grid.ini >bad.ini
	expect 2 "bad.ini:19: [model] layers = dense x 2, sideways" bad.ini
	# the sweep file itself
	sed 's/^out = out\/grid/outt = out\/grid/' grid.ini >bad.ini
	expect 2 "bad.ini:4: [sweep] outt: unknown key (expected base, out or seeds)" bad.ini
	sed 's/^\[grid\]/[gird]/' grid.ini >bad.ini
	expect 2 "bad.ini:10: [gird]: unknown section" bad.ini
	sed 's/^\[extra.dense\]/[extra.de\/nse]/' grid.ini >bad.ini
	expect 2 "bad.ini:18: [extra.de/nse]: expected a run name" bad.ini
	sed 's/^mod.router = random/run.name = x/' grid.ini >bad.ini
	expect 2 "bad.ini:16: [extra.router-random] run.name: set by the sweep" bad.ini
	sed 's/^base = tiny.ini/base = nothing.ini/' grid.ini >bad.ini
	expect 2 "bad.ini:3: [sweep] base = nothing.ini: nothing.ini: cannot open it" bad.ini
	sed 's/^mod.capacity = 0.25, 0.5/mod.capacity = 0.25, 0.25/' grid.ini >bad.ini
	expect 2 "bad.ini:11: [grid] mod.capacity = 0.25, 0.25: the value 0.25 is listed twice" bad.ini
	sed 's/^mod.capacity = 0.25, 0.5/mod.capacity = 0.25,, 0.5/' grid.ini >bad.ini
	expect 2 "bad.ini:11: [grid] mod.capacity = 0.25,, 0.5: expected a list of values" bad.ini
	sed 's/^\[extra.dense\]/[extra.capacity-0.5]/' grid.ini >bad.ini
	expect 2 "bad.ini:18: two runs would be named capacity-0.5 (the other from line 11)" bad.ini
	sed 's/^run.steps = 16 .*/run.steps = 16\nrun.steps = 8/' grid.ini >bad.ini
	expect 2 "bad.ini:8: [all] run.steps is set twice (first at line 7)" bad.ini
	printf '[sweep]\nbase = tiny.ini\n' >empty.ini
	expect 2 "empty.ini: nothing to run" empty.ini
	expect 2 "nothing.ini: cannot open it" nothing.ini
	# isoFLOP designs
	write_iso
	sed 's/^budgets = 1e9, 2e9/budgets = 1e9, 1e5/' iso.ini >bad.ini
	expect 2 "bad.ini:7: run.flops_budget = 100000 buys no step of run iso-100000-d16x2-dense" bad.ini
	sed 's/^budgets = 1e9, 2e9/budgets = 1e9, lots/' iso.ini >bad.ini
	expect 2 "bad.ini:7: [isoflop] budgets: lots: expected training FLOPs" bad.ini
	sed 's/^size = d_model=32 n_heads=2 d_ff=64 depth=2/size = d_model=32 n_heads=2 d_ff=64 depth=3/' iso.ini >bad.ini
	expect 2 "bad.ini:9: [isoflop] size: depth=3 is not a multiple of the 2 layers of [kind.mod]" bad.ini
	sed 's/^size = d_model=32 n_heads=2 d_ff=64 depth=2/size = d_model=30 n_heads=4 d_ff=64 depth=2/' iso.ini >bad.ini
	expect 2 "bad.ini:9: [model] d_model = 30" bad.ini
	sed 's/^pattern = dense, mod/pattern = dense, sideways/' iso.ini >bad.ini
	expect 2 "bad.ini:13: [model] layers = dense, sideways" bad.ini
	sed 's/^mod.capacity = 0.25/model.d_model = 8/' iso.ini >bad.ini
	expect 2 "bad.ini:14: [kind.mod] model.d_model: set by the isoFLOP design" bad.ini
	printf '[grid]\nmod.capacity = 0.5\n' >>iso.ini
	expect 2 "[isoflop] cannot be combined with [grid]" iso.ini
	# the command line
	"$exe" sweep grid.ini --bogus >out.txt 2>err.txt; [ $? -eq 2 ] || fail "--bogus"
	"$exe" sweep grid.ini run.out=elsewhere >out.txt 2>err.txt; [ $? -eq 2 ] || fail "run.out override"
	grep -q "command line: run.out=elsewhere: set by the sweep" err.txt || fail "$(cat err.txt)"
	"$exe" sweep grid.ini mod.capacity=3 >out.txt 2>err.txt; [ $? -eq 2 ] || fail "bad override"
	grep -q "command line: mod.capacity=3: expected" err.txt || fail "$(cat err.txt)"
	"$exe" sweep --help | grep -q "^usage: mode-exp sweep SWEEP.ini" || fail "--help"
	[ -e out ] && fail "out/ was created"
	;;
isoflop)
	needs_analyze
	write_iso
	"$exe" sweep iso.ini >run.txt 2>err.txt || fail "isoflop sweep: $(cat err.txt)"
	cat run.txt
	[ "$(grep -c ' trained ' run.txt)" -eq 8 ] || fail "expected 8 trained runs"
	for b in 1e9 2e9; do
		for s in "d16x2:16 2 32" "d32x2:32 2 64"; do
			set -- ${s#*:}
			for k in dense mod; do
				r=iso-$b-${s%%:*}-$k
				[ -s "out/iso/$r/run.h5" ] || fail "$r missing"
				case $k in
				dense) layers='dense x 2' extra= ;;
				mod) layers='dense, mod' extra=mod.capacity=0.25 ;;
				esac
				# steps = floor(budget / training FLOPs per step), as mode-exp flops counts them
				want=$("$exe" flops tiny.ini run.flops_budget=$b model.d_model=$1 model.n_heads=$2 \
					model.d_ff=$3 "model.layers=$layers" $extra | sed -n 's/^training steps *\([0-9]*\).*/\1/p')
				[ -n "$want" ] || fail "mode-exp flops for $r"
				[ "$(values "out/iso/$r/run.h5" metrics/step | tail -n 1)" = "$want" ] ||
					fail "$r: $(values "out/iso/$r/run.h5" metrics/step | tail -n 1) steps, expected $want"
			done
		done
	done
	# the report has the isoFLOP analysis: 2 budgets x 2 kinds
	csv=out/iso/report/isoflop.csv
	[ -s "$csv" ] || fail "no $csv"
	[ "$(wc -l <"$csv")" -eq 5 ] || fail "$csv: $(wc -l <"$csv") lines, expected a header and 4 rows"
	head -n 1 "$csv" | grep -q "^budget,kind,sizes,seeds,fit,n_opt,loss_opt,dense_loss_opt," || fail "csv header"
	# two sizes make no parabola: the best sampled size, whose loss (one seed) is its
	# run's final held-out loss
	awk -F, 'NR > 1 && ($3 != 2 || $4 != 1 || $5 != "best_sampled") { exit 1 }' "$csv" || fail "fit column: $(cat "$csv")"
	for row in 2 3 4 5; do
		run=$(sed -n "${row}p" "$csv" | cut -d, -f20)
		loss=$(sed -n "${row}p" "$csv" | cut -d, -f7)
		[ "$loss" = "$(values "out/iso/$run/run.h5" eval/loss_topk | tail -n 1)" ] ||
			fail "row $row: loss* $loss is not $run's final held-out loss"
	done
	# dense against itself: 0 and 1
	awk -F, 'NR > 1 && $2 == "dense" && ($9 != 0 || $10 != 1) { exit 1 }' "$csv" || fail "dense vs dense"
	# standalone, with three sizes: a parabola through them
	sed -i 's/^size = d_model=32 n_heads=2 d_ff=64 depth=2/&\nsize = d_model=24 n_heads=2 d_ff=48 depth=2/' iso.ini
	"$exe" sweep iso.ini --no-report >run2.txt 2>&1 || fail "third size: $(cat run2.txt)"
	[ "$(grep -c ' skipped ' run2.txt)" -eq 8 ] && [ "$(grep -c ' trained ' run2.txt)" -eq 4 ] ||
		fail "the added size: $(cat run2.txt)"
	"$an" isoflop out/iso >iso.txt || fail "mode-analyze isoflop"
	cat iso.txt
	for f in isoflop.md isoflop.csv isoflop_runs.csv isoflop.png; do
		grep -q "^wrote out/iso/$f$" iso.txt || fail "$f not written"
	done
	[ "$(wc -l <out/iso/isoflop.csv)" -eq 5 ] || fail "isoflop.csv rows"
	[ "$(wc -l <out/iso/isoflop_runs.csv)" -eq 13 ] || fail "isoflop_runs.csv rows"
	awk -F, 'NR > 1 && $3 != 3 { exit 1 }' out/iso/isoflop.csv || fail "3 sizes per group"
	# where the fit has its minimum inside, N* lies within the sampled sizes; else it is a sampled run
	awk -F, 'NR > 1 { if ($5 == "parabola" && ($6 < 9000 || $6 > 29000)) exit 1
		if ($5 == "best_sampled" && $6 != $21) exit 1 }' out/iso/isoflop.csv ||
		fail "N*: $(cat out/iso/isoflop.csv)"
	;;
report)
	needs_analyze
	write_grid
	"$exe" sweep grid.ini >run.txt 2>err.txt || fail "sweep: $(cat err.txt)"
	cat run.txt
	grep -q "report out/grid$" run.txt || fail "the report was not made"
	html=out/grid/report.html
	[ -s $html ] || fail "no $html"
	head -n 1 $html | grep -q "<!DOCTYPE html>" || fail "not HTML"
	tail -n 1 $html | grep -q "</html>" || fail "HTML not closed"
	grep -qi "https\?://" $html && fail "$html refers to the network"
	grep -q '<img [^>]*src="[^d]' $html && fail "an image that is not inline"
	for r in $grid_runs; do
		grep -q ">$r<" $html || fail "$r not in the report"
	done
	# the sweep figure of mod.capacity and curves, then for the three routed runs (groups
	# of one) heatmap, weights, routing analytics, compute per token and tokens
	n=$(grep -o 'src="data:image/png;base64,' $html | wc -l)
	[ "$n" -eq 17 ] || fail "$n inline images, expected 17"
	for f in compare.md compare.csv compare_groups.csv curves.png sweep_mod.capacity.png \
		capacity-0.25/heatmap_step16_seq0.png router-random/weights.png capacity-0.5/tokens.png; do
		[ -s out/grid/report/$f ] || fail "report/$f missing"
	done
	grep -q "isoflop" $html && fail "an isoFLOP section in a grid report"
	# every inline image decodes to the PNG beside the page
	sed -n 's/.*alt="held-out loss curves" src="data:image\/png;base64,\([^"]*\)".*/\1/p' $html |
		base64 -d >curves.png || fail "base64"
	cmp -s curves.png out/grid/report/curves.png || fail "inline curves differ from the file"
	# a report of any folder of runs, into another folder
	"$an" report out/grid --out elsewhere >rep.txt || fail "report --out"
	grep -q "^wrote elsewhere/report.html$" rep.txt || fail "report --out path: $(cat rep.txt)"
	"$an" report nothing >rep.txt 2>err.txt; [ $? -eq 1 ] || fail "report of a missing folder"
	grep -q "nothing: no such folder" err.txt || fail "$(cat err.txt)"
	mkdir empty
	"$an" report empty >rep.txt 2>err.txt; [ $? -eq 1 ] || fail "report of an empty folder"
	grep -q "empty: no runs" err.txt || fail "$(cat err.txt)"
	"$an" isoflop out/grid >rep.txt 2>err.txt; [ $? -eq 1 ] || fail "isoflop of a grid"
	grep -q "no run has run.flops_budget set" err.txt || fail "$(cat err.txt)"
	for c in isoflop report; do
		"$an" $c --help | grep -q "^usage: mode-analyze $c" || fail "$c --help"
	done
	;;
examples)
	# the example sweeps read, their configs check, and they plan what their comments say
	"$exe" sweep "$examples/capacity.ini" --dry-run >cap.txt 2>&1 || fail "capacity.ini: $(cat cap.txt)"
	cat cap.txt
	grep -q ": 15 runs into out/capacity/: 15 to train" cap.txt || fail "capacity.ini header"
	for r in capacity-0.125 capacity-0.25 capacity-0.5 router-random dense; do
		for s in 1 2 3; do
			grep -q "^$r-s$s .* run.seed=$s$" cap.txt || fail "capacity.ini: no run $r-s$s"
		done
	done
	grep -q "^dense-s1  *1683 steps" cap.txt && grep -q "^capacity-0.125-s3  *2953 steps" cap.txt ||
		fail "capacity.ini: steps differ from its comment"
	"$exe" sweep "$examples/capacity-deep.ini" --dry-run >deep.txt 2>&1 || fail "deep: $(cat deep.txt)"
	grep -q "^dense-s2  *1284 steps" deep.txt && grep -q "^capacity-0.125-s1  *2282 steps" deep.txt ||
		fail "capacity-deep.ini: steps differ from its comment"
	"$exe" sweep "$examples/ladder.ini" --dry-run >lad.txt 2>&1 || fail "ladder.ini: $(cat lad.txt)"
	grep -q "^flops_budget-1e13-s1  *841 steps" lad.txt && grep -q "^flops_budget-4e13-s1  *3367 steps" lad.txt ||
		fail "ladder.ini: steps differ from its comment"
	"$exe" sweep "$examples/s512.ini" --dry-run >s512.txt 2>&1 || fail "s512.ini: $(cat s512.txt)"
	grep -q ": 6 runs into out/s512/" s512.txt && grep -q "^router-learned-s3  *2167 steps" s512.txt ||
		fail "s512.ini: runs or steps differ from its comment"
	"$exe" sweep "$examples/capacity-deep-bpe.ini" --dry-run >bpe.txt 2>&1 || fail "bpe: $(cat bpe.txt)"
	grep -q ": 6 runs into out/capacity-deep-bpe/" bpe.txt && grep -q "^learned-s2  *1563 steps" bpe.txt &&
		grep -q "^router-random-s3  *1564 steps" bpe.txt || fail "capacity-deep-bpe.ini: runs or steps differ from its comment"
	"$exe" sweep "$examples/zoo.ini" --dry-run >zoo.txt 2>&1 || fail "zoo.ini: $(cat zoo.txt)"
	grep -q ": 36 runs into out/zoo/" zoo.txt && grep -q "^dense-s1  *856 steps" zoo.txt &&
		grep -q "^mod-s3  *1521 steps" zoo.txt && grep -q "^skipdecode-s2  *1177 steps" zoo.txt &&
		grep -q "^layerskip-s1  *841 steps" zoo.txt ||
		fail "zoo.ini: runs or steps differ from its comment"
	"$exe" sweep "$examples/ladder-zoo.ini" --dry-run >lz.txt 2>&1 || fail "ladder-zoo.ini: $(cat lz.txt)"
	grep -q "^flops_budget-1e13-s1  *428 steps" lz.txt && grep -q "^flops_budget-4e13-s1  *1712 steps" lz.txt ||
		fail "ladder-zoo.ini: steps differ from its comment"
	"$exe" sweep "$examples/ladder-moe.ini" --dry-run >lm.txt 2>&1 || fail "ladder-moe.ini: $(cat lm.txt)"
	grep -q "^flops_budget-6e12-s1  *505 steps" lm.txt && grep -q "^flops_budget-1.2e13-s1  *1010 steps" lm.txt ||
		fail "ladder-moe.ini: steps differ from its comment"
	"$exe" sweep "$examples/ladder-synthetic.ini" --dry-run >ls.txt 2>&1 || fail "ladder-synthetic.ini: $(cat ls.txt)"
	grep -q "^flops_budget-5e12-s1  *420 steps .*data.source=synthetic" ls.txt &&
		grep -q "^flops_budget-4e13-s1  *3367 steps" ls.txt || fail "ladder-synthetic.ini: steps differ from its comment"
	"$exe" sweep "$examples/ladder-s512.ini" --dry-run >l5.txt 2>&1 || fail "ladder-s512.ini: $(cat l5.txt)"
	grep -q "^flops_budget-1e13-s1  *598 steps .*data.seq_len=512" l5.txt &&
		grep -q "^flops_budget-4e13-s1  *2393 steps" l5.txt || fail "ladder-s512.ini: steps differ from its comment"
	"$exe" sweep "$examples/ladder-deep-bpe.ini" --dry-run >lb.txt 2>&1 || fail "ladder-deep-bpe.ini: $(cat lb.txt)"
	grep -q "^flops_budget-1e13-s1  *340 steps .*data.vocab=4096" lb.txt &&
		grep -q "^flops_budget-9e13-s1  *3061 steps" lb.txt || fail "ladder-deep-bpe.ini: steps differ from its comment"
	"$exe" sweep "$examples/synthetic.ini" --dry-run >syn.txt 2>&1 || fail "synthetic.ini: $(cat syn.txt)"
	grep -q ": 6 runs into out/synthetic/" syn.txt && grep -q "^router-learned-s2  *1500 steps" syn.txt ||
		fail "synthetic.ini: runs or steps differ from its comment"
	"$exe" sweep "$examples/mode-kinds.ini" --dry-run >kinds.txt 2>&1 || fail "kinds: $(cat kinds.txt)"
	grep -q ": 12 runs into out/mode-kinds/" kinds.txt || fail "mode-kinds.ini header"
	"$exe" sweep "$examples/isoflop.ini" --dry-run >iso.txt 2>&1 || fail "isoflop.ini: $(cat iso.txt)"
	grep -q "(isoFLOP design over .*mod.ini): 126 runs into out/isoflop/" iso.txt || fail "isoflop.ini header"
	[ "$(grep -c '^iso-' iso.txt)" -eq 126 ] || fail "isoflop.ini: not 126 runs"
	grep -q "^iso-4e12-d128x4-mod-s3 .*model.layers=(dense, mod) x 2  mod.capacity=0.125" iso.txt ||
		fail "isoflop.ini: the largest MoD run"
	# a seed list: every run per seed; run.seed belongs to it
	printf '[sweep]\nbase = %s\nseeds = 4, 7\n[grid]\nrun.seed = 1, 2\n' "$config" >seeds.ini
	"$exe" sweep seeds.ini --dry-run >out.txt 2>err.txt && fail "run.seed beside seeds accepted"
	grep -q "seeds.ini:5: run.seed: set by \[sweep\] seeds (line 3) in every run" err.txt ||
		fail "seeds message: $(cat err.txt)"
	[ -e out ] && fail "--dry-run created out/"
	;;
groups)
	# mpirun -n 2 --ranks-per-run 1: two groups side by side, each run with the
	# bits of the run alone at 1 rank; --ranks-per-run 2: those of it at 2 ranks
	command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
	write_small
	mpirun -n 2 "$exe" sweep small.ini --ranks-per-run 1 --dry-run >dry.txt 2>&1 || fail "dry run: $(cat dry.txt)"
	grep -q "4 to train, 0 to resume, 0 complete; 2 groups of 1 rank(s)" dry.txt || fail "dry-run header: $(cat dry.txt)"
	# the queue, longest first (d_model 32 before 16), ties in the sweep's order
	[ "$(grep '^d_model' dry.txt | cut -d' ' -f1 | tr '\n' ' ')" = \
		"d_model-32_lr-3e-3 d_model-32_lr-1e-3 d_model-16_lr-3e-3 d_model-16_lr-1e-3 " ] ||
		fail "queue: $(cat dry.txt)"
	for k in 1 2; do
		sed "s|^out = out|out = out/k$k|" small.ini >k$k.ini
		mpirun -n 2 "$exe" sweep k$k.ini --ranks-per-run $k --no-report >run$k.txt 2>&1 ||
			fail "sweep at $k rank(s) per run: $(cat run$k.txt)"
		cat run$k.txt
		[ "$(grep -c ' trained .* sweep ETA ' run$k.txt)" -eq 4 ] || fail "expected 4 trained lines with an ETA"
		grep -q "^# 4 runs: 4 trained, 0 resumed, 0 skipped, 0 failed" run$k.txt || fail "summary at $k"
		for d in 16 32; do for lr in 3e-3 1e-3; do
			r=d_model-${d}_lr-$lr
			if [ $k = 1 ]; then
				"$exe" tiny.ini run.steps=12 model.d_model=$d optim.lr=$lr run.out=alone1 run.name=$r \
					--quiet >alone.txt 2>&1 || fail "$r alone: $(cat alone.txt)"
			else
				mpirun -n 2 "$exe" tiny.ini run.steps=12 model.d_model=$d optim.lr=$lr run.out=alone2 \
					run.name=$r --quiet >alone.txt 2>&1 || fail "$r alone at 2: $(cat alone.txt)"
			fi
			"$compare" "alone$k/$r/run.h5" "out/k$k/$r/run.h5" 0 >cmp.txt 2>&1 ||
				fail "$r at $k rank(s) per run: losses differ from the run alone: $(cat cmp.txt)"
			"$compare" --tensors "alone$k/$r/ckpt.h5" "out/k$k/$r/ckpt.h5" 0 >cmp.txt 2>&1 ||
				fail "$r at $k rank(s) per run: checkpoint differs from the run alone: $(cat cmp.txt)"
		done; done
	done
	# 1 and 2 ranks are not the same bits (the sums go in another order)
	"$compare" out/k1/d_model-32_lr-3e-3/run.h5 out/k2/d_model-32_lr-3e-3/run.h5 0 >/dev/null 2>&1 &&
		fail "1 and 2 ranks per run gave the same bits: the groups did not split"
	# refused before any work: ranks that do not split into groups, a run whose
	# batch does not split over its ranks (named)
	sed "s|^out = out|out = out/r|" small.ini >r.ini
	mpirun -n 3 "$exe" sweep r.ini --ranks-per-run 2 >out.txt 2>&1 && fail "3 ranks in groups of 2"
	grep -q "ranks-per-run 2: the job's 3 rank(s) do not split into groups of 2" out.txt || fail "$(cat out.txt)"
	mpirun -n 3 "$exe" sweep r.ini --ranks-per-run 3 >out.txt 2>&1 && fail "batch 8 over 3 ranks"
	grep -q "batch = 8: expected a multiple of the 3 ranks (run d_model-16_lr-3e-3)" out.txt || fail "$(cat out.txt)"
	[ -e out/r ] && fail "a refused sweep left out/r"
	"$exe" sweep small.ini --ranks-per-run 0 >out.txt 2>&1; [ $? -eq 2 ] || fail "--ranks-per-run 0"
	grep -q "ranks-per-run 0: expected a positive integer" out.txt || fail "$(cat out.txt)"
	;;
groupfault)
	# a run that fails in one group ends that run only; the rest of the queue
	# is trained; the exit status names it; a second start resumes it
	command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
	write_small
	MODE_FAULT=error@2:10 mpirun -n 4 "$exe" sweep small.ini --ranks-per-run 2 --no-report >fault.txt 2>&1
	[ $? -ne 0 ] || fail "a failed run: exit 0"
	cat fault.txt
	# world rank 2 is group 1's rank 0: the first run group 1 takes fails (the
	# groups take runs as they are free: which one is not fixed)
	bad=$(sed -n 's/^\[[0-9]\/4\] \(d_model-[^ ]*\)  failed: .*step 10: forward\/backward failed.*(group 1)$/\1/p' fault.txt)
	[ -n "$bad" ] || fail "no failed line in group 1"
	[ "$(grep -c ' trained .*(group [01])$' fault.txt)" -eq 3 ] || fail "the other runs did not all train"
	grep -q "^# 4 runs: 3 trained, 0 resumed, 0 skipped, 1 failed" fault.txt || fail "summary"
	grep -q "sweep: 1 run(s) failed: $bad; run the sweep again" fault.txt || fail "not named"
	mpirun -n 4 "$exe" sweep small.ini --ranks-per-run 2 --no-report >again.txt 2>&1 || fail "again: $(cat again.txt)"
	cat again.txt
	grep -q "0 to train, 1 to resume, 3 complete" again.txt && grep -q "$bad  resumed  *12/12" again.txt ||
		fail "the failed run was not resumed"
	# a failure inside a step (its group's other rank waits in a collective)
	# ends the whole job at once, naming the run; a second start resumes it
	rm -r out
	MODE_FAULT=grad-allreduce@3:10 mpirun -n 4 "$exe" sweep small.ini --ranks-per-run 2 --no-report >step.txt 2>&1
	[ $? -ne 0 ] || fail "a failure in a step: exit 0"
	bad=$(sed -n 's/.*mode-exp: run \(d_model-[^ ]*\) (group 1, world rank 3): rank 1: step 10: the gradient all-reduce failed.*/\1/p' step.txt)
	[ -n "$bad" ] || fail "in-step failure not named: $(cat step.txt)"
	mpirun -n 4 "$exe" sweep small.ini --ranks-per-run 2 --no-report >again.txt 2>&1 || fail "again: $(cat again.txt)"
	grep -q "$bad  resumed  *12/12" again.txt || fail "not resumed: $(cat again.txt)"
	;;
evalcut)
	# A run whose every step is done but whose last evaluation a stop signal
	# cut short is not complete: the next start resumes it, which makes the
	# evaluation (it was counted complete and skipped, its held-out loss nan)
	cat >cut.ini <<-'EOF'
	[sweep]
	base = tiny.ini
	out = out/cut
	[all]
	model.d_model = 256
	model.d_ff = 1024
	run.eval_windows = 0
	run.final_eval_windows = 0
	run.ckpt_every = 1
	run.eval_every = 2
	run.steps = 2
	[extra.cut]
	EOF
	"$exe" sweep cut.ini --no-report >run.txt 2>&1 || fail "uninterrupted sweep: $(cat run.txt)"
	mv out/cut full
	cut=no
	for try in 1 2 3; do
		rm -rf out/cut
		"$exe" sweep cut.ini --no-report >run.txt 2>&1 &
		pid=$!
		i=0
		while ! h5dump -a step out/cut/cut/ckpt.h5 2>/dev/null | grep -q "(0): [1-9]" &&
			[ $i -lt 2400 ]; do
			sleep 0.05
			i=$((i + 1))
		done
		# a stop in step 2 (its training or its evaluation, several seconds
		# at this width) leaves step 2 done and its evaluation to the resume
		sleep 0.3
		kill -s TERM "$pid"
		wait "$pid"
		# cut before the last step's evaluation: 2 steps done, step 2 not evaluated
		if [ "$(values out/cut/cut/run.h5 metrics/step | tail -n 1)" = 2 ] &&
			[ "$(values out/cut/cut/run.h5 eval/step | tail -n 1)" != 2 ]; then
			cut=yes
			break
		fi
	done
	[ $cut = yes ] || fail "the signal never landed in the last evaluation: $(cat run.txt)"
	"$exe" sweep cut.ini --no-report >run.txt 2>&1 || fail "second start: $(cat run.txt)"
	cat run.txt
	grep -q "1 to resume, 0 complete" run.txt || fail "the cut run was counted complete"
	"$compare" full/cut/run.h5 out/cut/cut/run.h5 0 ||
		fail "the resumed run differs from the uninterrupted one"
	;;
slurm)
	# --slurm-array: a script of one array task per run, run here by hand
	write_small
	mkdir jobs bin
	"$exe" sweep small.ini --slurm-array jobs/small.sbatch 'optim.warmup=2' >w.txt 2>&1 || fail "write: $(cat w.txt)"
	[ -e out ] && fail "--slurm-array trained"
	# the script over the sweep file or its base config is refused, both whole
	cp small.ini small.orig
	cp tiny.ini tiny.orig
	"$exe" sweep small.ini --slurm-array small.ini >w.txt 2>&1 && fail "the script over the sweep file"
	grep -q "small.ini: refused as an output: it is small.ini" w.txt || fail "message: $(cat w.txt)"
	"$exe" sweep small.ini --slurm-array tiny.ini >w.txt 2>&1 && fail "the script over the base"
	cmp -s small.ini small.orig && cmp -s tiny.ini tiny.orig || fail "an input was replaced"
	grep -q "^#SBATCH --array=1-4$" jobs/small.sbatch && grep -q "^#SBATCH --ntasks=1$" jobs/small.sbatch ||
		fail "#SBATCH lines: $(cat jobs/small.sbatch)"
	[ "$(head -n 2 jobs/small.sbatch.runs | tr '\n' ' ')" = "d_model-32_lr-3e-3 d_model-32_lr-1e-3 " ] ||
		fail "run list, longest first: $(cat jobs/small.sbatch.runs)"
	# tasks 1 and 2 through a stand-in srun, 3 and 4 without one (plain execution)
	printf '#!/bin/sh\necho srun "$@" >>%s/srun.log\nshift\nexec "$@"\n' "$work" >bin/srun
	chmod +x bin/srun
	for t in 1 2 3 4; do
		p=$PATH
		[ $t -le 2 ] && p=$work/bin:$PATH
		(cd / && PATH=$p SLURM_ARRAY_TASK_ID=$t bash "$work/jobs/small.sbatch") >task$t.txt 2>&1 ||
			fail "task $t: $(cat task$t.txt)"
		grep -q "^\[1/1\] $(sed -n "${t}p" jobs/small.sbatch.runs)  *trained  *12/12" task$t.txt ||
			fail "task $t: $(cat task$t.txt)"
	done
	[ "$(grep -c -- '--ntasks=1 .*--only d_model' srun.log)" -eq 2 ] || fail "srun not used: $(cat srun.log)"
	(SLURM_ARRAY_TASK_ID=5 bash jobs/small.sbatch) >out.txt 2>&1 && fail "task 5 of 4"
	grep -q "SLURM_ARRAY_TASK_ID=5: no such line" out.txt || fail "$(cat out.txt)"
	# the sweep finds every run complete, with the tasks' overrides
	"$exe" sweep small.ini 'optim.warmup=2' --no-report >all.txt 2>&1 || fail "$(cat all.txt)"
	grep -q "0 to train, 0 to resume, 4 complete" all.txt || fail "tasks left runs: $(cat all.txt)"
	# --only: one run by name; an unknown one is refused listing the runs
	"$exe" sweep small.ini --only nosuch >out.txt 2>&1; [ $? -eq 2 ] || fail "--only nosuch"
	grep -q "small.ini: --only nosuch: no run of that name (its runs: d_model-16_lr-3e-3, " out.txt || fail "$(cat out.txt)"
	"$exe" sweep small.ini --only d_model-16_lr-3e-3 --ranks-per-run 1 >out.txt 2>&1; [ $? -eq 2 ] ||
		fail "--only with --ranks-per-run"
	# k ranks per task: mpirun where there is no srun
	if command -v mpirun >/dev/null && ! command -v srun >/dev/null; then
		sed "s|^out = out|out = out/two|" small.ini >two.ini
		"$exe" sweep two.ini --slurm-array jobs/two.sbatch --ranks-per-run 2 >w.txt 2>&1 ||
			fail "write: $(cat w.txt)"
		grep -q "^#SBATCH --ntasks=2$" jobs/two.sbatch || fail "ntasks 2"
		SLURM_ARRAY_TASK_ID=1 bash jobs/two.sbatch >two.txt 2>&1 || fail "task at 2 ranks: $(cat two.txt)"
		grep -q "2 rank(s) x" two.txt && grep -q "trained  *12/12" two.txt || fail "$(cat two.txt)"
	fi
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "ok: $test_name"
