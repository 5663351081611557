#!/bin/sh
# Input silently ignored (issue 42): every option a subcommand does not
# read, every option that acts only through another not given, every
# option or key given twice and every override of a kind's section that no
# layer reads is refused before any work, naming the rule (exit 2), where it
# used to be accepted and do nothing (or the last one won).  The cases that
# must go on working (the README's and the scripts' command lines) run too.
#   test_ignored.sh MODE_EXP MODE_ANALYZE|none CONFIG
set -u
test_name=ignored
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$1") config=$(abspath "$3")
an=$(abspath_or_none "$2")
enter_workdir
cp "$config" tiny.ini


# a routed model: eval's and sample's routing options have something to act on
"$exe" tiny.ini 'model.layers=dense, mod' run.steps=8 run.out=m --quiet || fail "training m"
ck=m/tiny/ckpt.h5 rh=m/tiny/run.h5

# ---- an option the subcommand does not read (the one table of options) ----
not_of() { echo "$1 is not an option of $2, which would ignore it; $2 takes"; }
expect 2 "$(not_of --resume eval)" "$exe" eval $ck --resume
expect 2 "$(not_of --max-steps eval)" "$exe" eval $ck --max-steps 3
expect 2 "$(not_of --windows sample)" "$exe" sample $ck --prompt ab --tokens 4 --windows 4
expect 2 "$(not_of --record sample)" "$exe" sample $ck --prompt ab --tokens 4 --record r.h5
nothing_left r.h5
expect 2 "$(not_of --dial sample)" "$exe" sample $ck --prompt ab --tokens 4 --dial mod.capacity=1
expect 2 "$(not_of --tokens training)" "$exe" tiny.ini run.out=t --tokens 5
nothing_left t
expect 2 "$(not_of --jsonl flops) none" "$exe" flops tiny.ini --jsonl
expect 2 "$(not_of --init-from bench)" "$exe" bench tiny.ini --init-from $ck
expect 2 "$(not_of --threads plan)" "$exe" plan tiny.ini --threads 2
expect 2 "mode-exp --help-keys: --mardown would be ignored" "$exe" --help-keys --mardown
# what eval read before: each is refused before any evaluation (no loss line)
grep -q "loss" out.txt && fail "a refused command evaluated: $(cat out.txt)"
expect 2 "brown takes its labels from brown.pos.*--labels x.pos would be ignored" \
	"$exe" tokenize brown --vocab 300 --labels x.pos
if [ "$an" != none ]; then
	expect 2 "mode-analyze compare: --svg is not an option of compare, which would ignore it" \
		"$an" compare $rh --svg --out a1
	nothing_left a1
	expect 2 "mode-analyze heatmap: --baseline is not an option of heatmap.*heatmap takes" \
		"$an" heatmap $rh --baseline dense --out a2
	expect 2 "mode-analyze report: --key is not an option of report" \
		"$an" report m --key mod.capacity --out a3
	nothing_left a2
	nothing_left a3
	# one run given twice (a folder and a run file in it, another spelling)
	# was two replicates with sd 0
	expect 2 "m/tiny/run.h5 and ./m/tiny/run.h5 are one file, given twice" \
		"$an" compare $rh ./$rh --out a5
	expect 2 "are one file, given twice" "$an" curves m $rh --out a5
	nothing_left a5
fi

# ---- an option that acts only through another --------------------------
expect 2 "routing-layers says where --routing applies" "$exe" eval $ck --routing-layers 1
expect 2 "routing-layers says where --routing applies" \
	"$exe" sample $ck --prompt ab --tokens 4 --routing-layers 1
expect 2 "seed keys the draws of --routing random" "$exe" eval $ck --seed 3
expect 2 "seed keys the draws of --routing random" "$exe" eval $ck --routing bottom --seed 3
expect 2 "at --temperature 0 without --routing random nothing is drawn" \
	"$exe" sample $ck --prompt ab --tokens 4 --temperature 0 --seed 3
expect 2 "top-k narrows the draw at a temperature above 0" \
	"$exe" sample $ck --prompt ab --tokens 4 --temperature 0 --top-k 5
expect 2 "upcycle-noise and --upcycle-reinit shape what --init-from" \
	"$exe" tiny.ini run.out=u --upcycle-noise 0
expect 2 "quiet prints nothing but errors, so --jsonl" "$exe" tiny.ini run.out=u --quiet --jsonl
nothing_left u
# a key of a section that no layer reads (training, flops, bench, plan; eval
# refused it before)
expect 2 "command line: mod.capacity=0.5: no layer of this model (dense) reads \[mod\]" \
	"$exe" tiny.ini mod.capacity=0.5 run.out=u
nothing_left u
expect 2 "no layer of this model (dense, moe) reads \[mod\]" \
	"$exe" flops tiny.ini 'model.layers=dense, moe' mod.capacity=0.5
expect 2 "no layer of this model (dense) reads \[moe\]" "$exe" plan tiny.ini moe.experts=8
printf '[sweep]\nbase = tiny.ini\nout = sw\n[grid]\nrun.steps = 2, 3\n' >sw.ini
expect 2 "command line: mod.capacity=0.5: no layer of any run of the sweep reads \[mod\]" \
	"$exe" sweep sw.ini mod.capacity=0.5 --dry-run
"$exe" sweep sw.ini 'model.layers=dense, mod' mod.capacity=0.5 --dry-run >/dev/null ||
	fail "sweep with a [mod] key its runs read"
# an override the dial replaces at each of its values
expect 2 "mod.capacity=0.5 and --dial mod.capacity=0.25,1: the dial sets the key" \
	"$exe" eval $ck mod.capacity=0.5 --dial mod.capacity=0.25,1

# 0, which meant the default (every window, no limit), says nothing given
expect 2 "windows 0: expected a positive integer" "$exe" eval $ck --windows 0
expect 2 "max-steps 0: expected a positive integer" "$exe" tiny.ini run.out=u --max-steps 0
nothing_left u

# ---- an option or key given twice (the last won) ------------------------
expect 2 "windows given twice (4, then 8): give each option once" \
	"$exe" eval $ck --windows 4 --windows 8
expect 2 "max-steps given twice (2, then 4)" "$exe" tiny.ini run.out=u --max-steps 2 --max-steps 4
nothing_left u
expect 2 "run.steps=3, then run.steps=4: one key given twice" "$exe" flops tiny.ini run.steps=3 \
	run.steps=4
expect 2 "sweep: --threads given twice (1, then 2)" "$exe" sweep x.ini --threads 1 --threads 2
expect 2 "tokenize: --vocab given twice (300, then 400)" \
	"$exe" tokenize x.txt X --vocab 300 --vocab 400
[ "$an" != none ] && expect 2 "mode-analyze heatmap: --step given twice (4, then 8)" \
	"$an" heatmap $rh --step 4 --step=8

# ---- what must go on working --------------------------------------------
"$exe" eval $ck --windows 2 --routing random --seed 3 >/dev/null || fail "eval --routing random --seed"
"$exe" eval $ck --windows 2 --mode topk --routing bottom --routing-layers 1 >/dev/null ||
	fail "eval --routing-layers with --routing"
"$exe" eval $ck --windows 2 --dial mod.capacity=0.25,1 >/dev/null || fail "eval --dial"
"$exe" sample $ck --prompt ab --tokens 4 --temperature 0 >/dev/null || fail "greedy sample"
"$exe" sample $ck --prompt ab --tokens 4 --top-k 5 --seed 2 >/dev/null || fail "sample --top-k"
"$exe" sample $ck --prompt ab --tokens 4 --temperature 0 --routing random --seed 2 >/dev/null ||
	fail "greedy sample --routing random --seed"
"$exe" flops tiny.ini 'model.layers=dense, mod' mod.capacity=0.5 >/dev/null ||
	fail "flops with a [mod] key a layer reads"
"$exe" flops tiny.ini 'model.layers=dense, mod' layer.1.capacity=0.5 >/dev/null ||
	fail "flops with a [layer.N] key"
[ "$an" != none ] && { "$an" compare $rh --out a4 >/dev/null || fail "compare"; }
# a file may set a section no layer reads (one file for several models): a
# note says so, and the command goes on
printf '[model]\nlayers = dense x 2\n[mod]\ncapacity = 0.5\n' >unread.ini
expect 0 "note: unread.ini sets keys of \[mod\], which no layer of this model (dense) reads" \
	"$exe" flops unread.ini
# every config under experiments/ still loads with the README's commands
for f in "$(dirname "$config")"/../../experiments/*.ini; do
	grep -q '^\[sweep\]' "$f" && continue
	"$exe" flops "$f" >/dev/null || fail "flops $f"
done
echo "ok: ignored"
