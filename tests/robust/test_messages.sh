#!/bin/sh
# Messages that mislead (issue 42): every message says what is true.  A
# refusal names the rule it applies (and the README's own dial is not
# refused); a claim about files is checked when it is said; a result that
# is made is shown; a --help line says what the code does.
#   test_messages.sh MODE_EXP MODE_ANALYZE|none CONFIG
set -u
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$1") config=$(abspath "$3") an=$(abspath_or_none "$2")
enter_workdir

# not_said PATTERN WHAT: the last command's output does not claim PATTERN
not_said() {
	grep -q -- "$1" out.txt && fail "$2: $(cat out.txt)"
	return 0
}

# ---- 1. the dial of one layer, as the README documents it (layer.N.key),
# and refusals that name this context's rule
"$exe" "$config" run.out=m 'model.layers=(dense, mod) x 2' --quiet || fail "training a MoD model"
ck=m/tiny/ckpt.h5
fl() { sed 's/.*"flops_per_token": \([^,}]*\).*/\1/'; }
base=$("$exe" eval $ck --mode topk --windows 8 --json | fl)
one=$("$exe" eval $ck layer.1.capacity=1 --mode topk --windows 8 --json | fl) ||
	fail "eval $ck layer.1.capacity=1 is refused"
all=$("$exe" eval $ck mod.capacity=1 --mode topk --windows 8 --json | fl)
# layer 1 at capacity 1 costs more than the model as trained, less than
# both routed layers at 1: the override reached that layer alone
awk -v b="$base" -v o="$one" -v a="$all" 'BEGIN { exit !(b < o && o < a) }' ||
	fail "layer.1.capacity=1 is not layer 1's dial: FLOPs $base, $one, $all (mod.capacity=1)"
echo "ok: eval layer.1.capacity=1: $one FLOPs a token (as trained $base, every layer $all)"
expect 0 "the dial of layer.1.capacity" "$exe" eval $ck --dial layer.1.capacity=0.25,0.5 --windows 4
expect 0 "layer 1 (mod): .* took the block" "$exe" sample $ck layer.1.capacity=0.5 --prompt ab --tokens 4
expect 0 "loss" "$exe" eval $ck layer.3.mod.capacity=0.5 --windows 2
# the run's own key: the rule names the sections this model's layers read
expect 1 "change only the kinds' keys: this model's layers (dense, mod) read \[mod\] and \[layer.N\] for N in 0..3" \
	"$exe" eval $ck run.steps=3
not_said "\[data\], \[model\]" "a refusal of eval lists sections eval refuses"
expect 1 "\[layer.x\] is not one of them" "$exe" eval $ck layer.x.capacity=0.5
not_said "expected a section among \[run\]" "a refusal of eval lists [run] as accepted"
expect 1 "expected section.key=value, a kind's key such as mod.capacity" "$exe" eval $ck capacity=1
not_said "run.steps=1000" "eval is told to set run.steps"
expect 1 "layer 0 is 'dense', which takes no key 'capacity'" "$exe" eval $ck layer.0.capacity=0.5
expect 1 "no layer of this model (dense, mod) reads \[moe\]" "$exe" sample $ck moe.top_k=2 \
	--prompt a --tokens 2
# a model's kinds, each named (mod after tcmod was left out: "(tcmod)")
"$exe" "$config" run.out=tc 'model.layers=tcmod, mod' run.steps=2 --quiet || fail "training tcmod, mod"
expect 1 "no layer of this model (tcmod, mod) reads \[moe\]" "$exe" eval tc/tiny/ckpt.h5 moe.top_k=2
expect 2 "no layer of this model (tcmod, mod) takes it" "$exe" eval tc/tiny/ckpt.h5 --routing noop-all
expect 2 "--prompt TEXT or --prompt-ids I,J,..., not both" "$exe" sample $ck --prompt a \
	--prompt-ids 1 --tokens 2
expect 2 "writes the table of --routing, --record or --dial" "$exe" eval $ck --csv t.csv
[ -e t.csv ] && fail "eval --csv alone wrote t.csv"

# ---- 2. a stopped run says which checkpoint there is, read back
export MODE_FAULT=nan@2
expect 1 "step 2: non-finite .*; no checkpoint was written (the first is due at step 8)" \
	"$exe" "$config" run.out=n --quiet
unset MODE_FAULT
not_said "checkpoint is kept" "claims a checkpoint where there is none"
[ -e n/tiny/ckpt.h5 ] && fail "a checkpoint after step 2 of ckpt_every 8"
h5ls n/tiny/records/step_00000002.h5/nonfinite >/dev/null 2>&1 ||
	fail "the message names the batch's piece, which lacks it"
# its folder: each way out named is one the folder takes
expect 1 "the run stopped before its first checkpoint; --overwrite starts it anew" \
	"$exe" "$config" run.out=n --resume --quiet
expect 1 "it has no checkpoint to resume from; --overwrite replaces it" "$exe" "$config" run.out=n --quiet
not_said "--resume continues it" "offers --resume to a run without a checkpoint"
export MODE_FAULT=nan@10
expect 1 "step 10: non-finite .*; the checkpoint n2/tiny/ckpt.h5 of step 8 is whole" \
	"$exe" "$config" run.out=n2 --quiet
unset MODE_FAULT
h5dump -a step n2/tiny/ckpt.h5 | grep -q "(0): 8" || fail "n2's checkpoint is not step 8"
# the fatal callback (a rank failing inside a step, before any checkpoint)
export MODE_FAULT=grad-allreduce@1:3
expect 1 "rank 1: step 3: .*stopping every rank (no checkpoint was written" \
	timeout 120 mpirun -n 2 "$exe" "$config" run.out=f --quiet
unset MODE_FAULT
not_said "is whole" "the fatal message claims a whole checkpoint"

# ---- 3. a resume that makes the final evaluation a signal cut short prints
# its eval line, the uninterrupted run's numbers.  The evaluation takes all
# the held-out windows (3124, about a second in a release build; under the
# sanitizers, which are slower, a held-out split of 625); a signal before it
# lands in it too (the evaluation checks between its chunks), so the first
# tries come early
cut="run.eval_windows=0 run.final_eval_windows=0 run.ckpt_every=1 run.eval_every=2 run.steps=2"
[ -n "$sanitized" ] && cut="$cut data.val_fraction=0.02"
# shellcheck disable=SC2086
"$exe" "$config" run.out=full $cut >full.txt 2>&1 || fail "the uninterrupted run: $(cat full.txt)"
want=$(grep '^eval ' full.txt)
[ -n "$want" ] || fail "the uninterrupted run printed no eval line: $(cat full.txt)"
landed=no
for delay in 0 0.1 0.3 0.05; do
	rm -rf e
	# shellcheck disable=SC2086
	"$exe" "$config" run.out=e $cut >cut.txt 2>&1 &
	pid=$!
	i=0
	while ! h5dump -a step e/tiny/ckpt.h5 2>/dev/null | grep -q "(0): 1" && [ $i -lt 2400 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	sleep $delay
	kill -s TERM $pid
	wait $pid
	code=$?
	[ $code -eq 143 ] || fail "SIGTERM in the evaluation: exit $code: $(cat cut.txt)"
	if grep -q "during its evaluation, which the resume makes" cut.txt; then
		landed=yes
		break
	fi
done
[ $landed = yes ] || fail "the signal never landed in the evaluation: $(cat cut.txt)"
grep -q "the checkpoint e/tiny/ckpt.h5 of step 2 is whole and --resume goes on from it" cut.txt ||
	fail "the stopped run does not name its checkpoint: $(cat cut.txt)"
grep -q '^eval ' cut.txt && fail "the cut evaluation printed a line: $(cat cut.txt)"
# shellcheck disable=SC2086
"$exe" "$config" run.out=e $cut --resume >resume.txt 2>&1 || fail "resume: $(cat resume.txt)"
got=$(grep '^eval ' resume.txt)
[ "$got" = "$want" ] || fail "the resumed evaluation printed '$got', the uninterrupted run '$want'"
grep -q '^step ' resume.txt && fail "the resume printed step 2's line again: $(cat resume.txt)"
echo "ok: resumed: $got"

# ---- 4. --help says what the code does
expect 0 "a sliding window" "$exe" sample --help
not_said "stops at the model's sequence length" "sample --help says generation stops at S"
expect 0 "past the context: a sliding window of the last S" "$exe" sample $ck --prompt ab --tokens 40
expect 0 "tokenize TEXT OUT" "$exe" --help
expect 0 "OPENBLAS_NUM_THREADS" "$exe" sweep --help
if [ "$an" != none ]; then # mode-analyze is built with cairo
	expect 2 "1 file given, lossdiff takes at least 2" "$an" lossdiff m/tiny/run.h5
	not_said "no run file given" "a record file given is 'no run file given'"
	expect 0 "default: SWEEP_DIR" "$an" isoflop --help
fi
echo "all messages true"
