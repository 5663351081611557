#!/bin/sh
# End-to-end tests of mode-exp on the tiny config.
#   test_cli.sh TEST MODE_EXP COMPARE_RUNS CONFIG
# TEST: ranks | resume | eval | flops | layout | errors | ... | routing | executed
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") compare=$(abspath "$3") config=$(abspath "$4")
src=$(cd "$(dirname "$0")/../.." && pwd) # the repository
enter_workdir

run() { # dir ranks args...: train the tiny config into dir
	dir=$1 n=$2
	shift 2
	mpirun -n "$n" "$exe" "$config" run.out="$dir" --quiet "$@" || fail "mode-exp -n $n $*"
}

case $test_name in
ranks)
	# The global batch is the same whatever the rank count, so the losses
	# agree up to the order of float sums in the all-reduce.
	for n in 1 2 4; do run "r$n" "$n"; done
	"$compare" r1/tiny/run.h5 r2/tiny/run.h5 1e-4 || fail "-n 1 and -n 2 differ"
	"$compare" r1/tiny/run.h5 r4/tiny/run.h5 1e-4 || fail "-n 1 and -n 4 differ"
	# The shared gradients are summed in rank order (comm_sum), started
	# bucket by bucket during the backward ([optim] overlap, the default) or
	# all after it: the same bits, at 2 and 4 ranks, with a bucket a layer
	# (bucket_kb = 1) and with the experts' all-to-alls in the backward too.
	mixed='model.layers=dense, staged, moe, mod'
	for n in 2 4; do
		run "o$n" "$n" optim.bucket_kb=1 "$mixed"
		run "b$n" "$n" optim.overlap=false "$mixed"
		"$compare" "o$n/tiny/run.h5" "b$n/tiny/run.h5" 0 || fail "-n $n: overlapped differs"
		"$compare" --tensors "o$n/tiny/ckpt.h5" "b$n/tiny/ckpt.h5" 0 ||
			fail "-n $n: overlapped checkpoint differs"
	done
	;;
threads)
	# One rank with 1, 2 and 3 threads: products are cut into bands whose
	# bounds depend on the shape alone (each band one call of the same shape
	# on whichever thread), attention into (sequence, head) tasks and loops
	# into fixed chunks, so the run files and the checkpoints (parameters
	# and Adam moments) are the same bits, in fp32 and in bf16, on every
	# OpenBLAS kernel set.  Wide enough that the products are cut; every
	# kind once.
	wide='model.d_model=64 model.d_ff=256 data.batch=16'
	[ -n "$sanitized" ] && wide="$wide run.steps=12 run.eval_every=6"
	for p in fp32 bf16; do
		for t in 1 2 3; do
			run "$p$t" 1 $wide 'model.layers=dense, mod, moe, integrated, staged' \
				run.precision=$p --threads "$t"
		done
		for t in 2 3; do
			"$compare" "${p}1/tiny/run.h5" "$p$t/tiny/run.h5" 0 ||
				fail "$p: $t threads differ from 1"
			"$compare" --tensors "${p}1/tiny/ckpt.h5" "$p$t/tiny/ckpt.h5" 0 ||
				fail "$p: checkpoint of $t threads differs from 1"
		done
	done
	;;
bf16)
	# [run] precision = bf16: the products in bf16 (on AMX tiles, AVX512_BF16
	# or emulated: the fastest path the CPU has), fp32 everything else (the
	# same bits at any thread count: cli-threads).
	# bf16 rounds each operand to 8 bits of mantissa (relative error 2^-9).
	# On a dense model that moves 24 steps' losses by 1e-4 and gradient
	# norms by 1% (6e-5 and 0.7% seen): allowed 1e-3 and 5%.  With routed
	# layers a near-tie in a routing decision can flip, which moves one
	# step's gradient norm by half (seen) but the losses by 0.5% at most:
	# losses within 2%, gradient norms not compared.  An fp32 product where
	# a bf16 one was meant would move nothing at all.
	wide='model.d_model=64 model.d_ff=256 data.batch=16'
	[ -n "$sanitized" ] && wide="$wide run.steps=12 run.eval_every=6"
	run bd 1 $wide run.precision=bf16
	run fd 1 $wide
	"$compare" fd/tiny/run.h5 bd/tiny/run.h5 1e-3 0.05 || fail "dense bf16 far from fp32"
	"$compare" fd/tiny/run.h5 bd/tiny/run.h5 0 >/dev/null && fail "bf16 run equals fp32"
	# the path is named by --version and in the run's provenance; every
	# path this CPU has can be forced (MODE_BF16_KERNEL) and computes the
	# same numbers up to the order of fp32 sums; one it lacks is refused
	fastest=$("$exe" --version | sed -n 's/^bf16 products: \([a-z0-9-]*\) .*/\1/p')
	h5dump -a provenance/bf16_kernel bd/tiny/run.h5 | grep -q "\"$fastest\"" ||
		fail "provenance does not name the bf16 path $fastest"
	for path in amx avx512-bf16 emulated; do
		if "$exe" --version | grep -q "paths here:.* $path[,;]"; then
			MODE_BF16_KERNEL=$path run "b-$path" 1 $wide run.precision=bf16
			h5dump -a provenance/bf16_kernel "b-$path/tiny/run.h5" | grep -q "\"$path\"" ||
				fail "provenance of a run forced to $path"
			"$compare" bd/tiny/run.h5 "b-$path/tiny/run.h5" 1e-3 0.05 ||
				fail "bf16 on $path far from $fastest"
		else
			MODE_BF16_KERNEL=$path "$exe" "$config" run.out=refused --quiet 2>err.txt &&
				fail "MODE_BF16_KERNEL=$path accepted on a CPU without it"
			grep -q "MODE_BF16_KERNEL=$path: this CPU has no" err.txt ||
				fail "refusal of $path: $(cat err.txt)"
		fi
	done
	MODE_BF16_KERNEL=fp8 "$exe" --version 2>err.txt && fail "MODE_BF16_KERNEL=fp8 accepted"
	grep -q "expected amx, avx512-bf16 or emulated" err.txt || fail "fp8: $(cat err.txt)"
	run b1 1 $wide 'model.layers=dense, mod, moe, integrated, staged' run.precision=bf16
	run f1 1 $wide 'model.layers=dense, mod, moe, integrated, staged'
	"$compare" f1/tiny/run.h5 b1/tiny/run.h5 0.02 none || fail "bf16 far from fp32"
	"$compare" f1/tiny/run.h5 b1/tiny/run.h5 0 >/dev/null && fail "routed bf16 run equals fp32"
	# evaluated as trained, sampled (in fp32), and resumed bit for bit
	"$exe" eval b1/tiny/ckpt.h5 --json >/dev/null || fail "eval of a bf16 checkpoint"
	"$exe" sample b1/tiny/ckpt.h5 --prompt "ab" --tokens 4 >/dev/null || fail "sample bf16"
	run bc 1 $wide 'model.layers=dense, mod, moe, integrated, staged' run.precision=bf16 \
		--max-steps 10
	run bc 1 $wide 'model.layers=dense, mod, moe, integrated, staged' run.precision=bf16 --resume
	"$compare" b1/tiny/run.h5 bc/tiny/run.h5 0 || fail "resumed bf16 run differs"
	;;
resume)
	# Stop after 10 steps, resume: bit for bit the uninterrupted run.
	for n in 1 2; do
		run "full$n" "$n"
		run "cut$n" "$n" --max-steps 10
		run "cut$n" "$n" --resume
		"$compare" "full$n/tiny/run.h5" "cut$n/tiny/run.h5" 0 || fail "resumed run differs at -n $n"
	done
	# with routed layers: statistics tables and routing records survive it
	run fullm 1 'model.layers=(dense, mod) x 2'
	run cutm 1 'model.layers=(dense, mod) x 2' --max-steps 10
	run cutm 1 'model.layers=(dense, mod) x 2' --resume
	"$compare" fullm/tiny/run.h5 cutm/tiny/run.h5 0 || fail "resumed mod run differs"
	[ "$(h5ls -r fullm/tiny/run.h5 | wc -l)" = "$(h5ls -r cutm/tiny/run.h5 | wc -l)" ] ||
		fail "resumed run file has other datasets"
	h5dump -d layer_stats/1/recall fullm/tiny/run.h5 | sed 1d >a.txt
	h5dump -d layer_stats/1/recall cutm/tiny/run.h5 | sed 1d >b.txt
	cmp -s a.txt b.txt || fail "layer statistics differ after resume"
	# resuming with another config is refused
	mpirun -n 1 "$exe" "$config" run.out=cut1 model.d_ff=48 --resume --quiet 2>err.txt &&
		fail "resume with another config was accepted"
	grep -q "does not match" err.txt || fail "resume mismatch message: $(cat err.txt)"
	;;
eval)
	run e 1
	a=$("$exe" eval e/tiny/ckpt.h5 --mode topk --json) || fail "eval"
	b=$(mpirun -n 2 "$exe" eval e/tiny/ckpt.h5 --mode topk --json) || fail "eval -n 2"
	c=$("$exe" eval e/tiny/ckpt.h5 --mode topk --json) || fail "eval again"
	echo "$a"
	[ "$a" = "$c" ] || fail "eval is not deterministic: $a / $c"
	echo "$a" | grep -q '"windows": [1-9]' || fail "eval json: $a"
	echo "$a" | grep -q '"mode": "topk"' || fail "eval json mode: $a"
	# two ranks split the windows: the same loss within float rounding
	la=$(echo "$a" | sed 's/.*"loss": \([^,]*\),.*/\1/')
	lb=$(echo "$b" | sed 's/.*"loss": \([^,]*\),.*/\1/')
	awk -v a="$la" -v b="$lb" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-5 * a) }' ||
		fail "eval -n 1 $la, -n 2 $lb"
	# a text file of our own: its windows from the start
	head -c 5000 /dev/urandom | base64 >text.txt
	"$exe" eval e/tiny/ckpt.h5 --data text.txt --windows 4 --json | grep -q '"windows": 4' ||
		fail "eval --data text.txt"
	# a token file with a token beyond the model's vocabulary (256): the window
	# that reads it stops eval on every rank, naming the file and the offset
	i=0
	while [ $i -lt 100 ]; do printf '\001\000'; i=$((i + 1)); done >bad.bin
	printf '\000\001' >>bad.bin
	while [ $i -lt 200 ]; do printf '\001\000'; i=$((i + 1)); done >>bad.bin
	mpirun -n 2 "$exe" eval e/tiny/ckpt.h5 --data bad.bin >out.txt 2>&1 && fail "eval of bad.bin"
	grep -q "bad.bin: token 100 (byte offset 200) is 256, not below vocab 256" out.txt ||
		fail "eval of bad.bin: $(cat out.txt)"
	[ "$(grep -c 'mode-exp eval:' out.txt)" -eq 1 ] || fail "not one message: $(cat out.txt)"
	;;
flops)
	# tiny: per sequence 2 layers x 786432 + head 524288 = 2097152;
	# batch 8: 16777216 forward, 50331648 training per step
	out=$("$exe" flops "$config") || fail "flops"
	echo "$out"
	echo "$out" | grep -q "forward per sequence *2.097e+06" || fail "forward per sequence"
	echo "$out" | grep -q "training per step *5.033e+07" || fail "training per step"
	;;
layout)
	run l 2
	ls=$(h5ls -r l/tiny/run.h5) || fail "h5ls run.h5"
	for d in metrics/step metrics/loss metrics/lr metrics/grad_norm metrics/tokens_per_s \
		metrics/train_flops metrics/wall_s eval/step eval/loss_topk eval/loss_causal provenance; do
		echo "$ls" | grep -q "^/$d " || fail "run.h5 has no /$d"
	done
	h5dump -a provenance/commit l/tiny/run.h5 | grep -q '(0): "[0-9a-z]' ||
		fail "provenance/commit is empty: $(h5dump -a provenance/commit l/tiny/run.h5)"
	for a in version modified openblas mpi hdf5 cpu ranks blas_threads command_line started; do
		h5dump -a "provenance/$a" l/tiny/run.h5 >/dev/null || fail "no provenance/$a"
	done
	h5dump -a config l/tiny/run.h5 | grep -q "d_model = 32" || fail "run.h5 config"
	ls=$(h5ls -r l/tiny/ckpt.h5) || fail "h5ls ckpt.h5"
	for d in tok_emb final_norm layers/0/attn_norm layers/0/wq layers/0/wk layers/0/wv \
		layers/0/wo layers/0/mlp_norm layers/0/w1 layers/0/w3 layers/1/w2 optim/m/tok_emb \
		optim/v/layers/1/w2; do
		echo "$ls" | grep -q "^/$d " || fail "ckpt.h5 has no /$d"
	done
	h5dump -a layers/0/kind l/tiny/ckpt.h5 | grep -q '"dense"' || fail "layer kind attribute"
	h5dump -a n_layers l/tiny/ckpt.h5 | grep -q "2" || fail "n_layers attribute"
	h5ls l/tiny/ckpt.h5/layers/0/w1 | grep -q "{32, 64}" || fail "w1 shape"
	ls l/tiny | grep -q tmp && fail "temporary files left behind"
	;;
errors)
	"$exe" "$config" --no-such-flag >out.txt 2>&1 && fail "unknown flag accepted"
	grep -q "unknown option --no-such-flag" out.txt || fail "flag message: $(cat out.txt)"
	"$exe" "$config" model.d_model=30 --quiet >out.txt 2>&1; [ $? -eq 2 ] || fail "exit code"
	grep -q "command line: model.d_model=30" out.txt || fail "override message: $(cat out.txt)"
	"$exe" missing.ini >out.txt 2>&1 && fail "missing config accepted"
	grep -q "missing.ini" out.txt || fail "missing config message: $(cat out.txt)"
	mpirun -n 3 "$exe" "$config" --quiet >out.txt 2>&1 && fail "batch 8 on 3 ranks accepted"
	grep -q "batch" out.txt || fail "rank message: $(cat out.txt)"
	# SkipDecode's stack (docs/kinds/skipdecode.md): a schedule that rises,
	# skipdecode layers apart, a layer above them the schedule skips, one
	# that never runs, layers that disagree: each refused, naming why
	sk='model.layers=dense, skipdecode, skipdecode, dense'
	sk_refused() { # message args...
		msg=$1
		shift
		"$exe" "$config" "$@" --quiet >out.txt 2>&1 && fail "skipdecode: $* accepted"
		grep -q -- "$msg" out.txt || fail "skipdecode: $*: $(cat out.txt); expected: $msg"
	}
	sk_refused "never rise with position" "$sk" skipdecode.max_layers=1 skipdecode.min_layers=2
	sk_refused "must be adjacent" "model.layers=dense, skipdecode, dense, skipdecode" \
		skipdecode.min_layers=2
	sk_refused "min_layers = 1, but layer 2 (dense)" "model.layers=dense, skipdecode, dense, dense"
	sk_refused "layer 1 of 4 never runs" "$sk" skipdecode.min_layers=2 skipdecode.max_layers=2
	sk_refused "different .skipdecode. keys" "$sk" skipdecode.min_layers=2 layer.2.max_layers=4
	"$exe" "$config" "$sk" skipdecode.min_layers=2 run.out=sk --quiet ||
		fail "skipdecode: a stack it reads refused"
	rm -rf sk
	[ -e out ] && fail "a refused run left output behind"
	"$exe" --help | grep -q "usage: mode-exp" || fail "--help"
	"$exe" eval --help | grep -q "usage: mode-exp eval" || fail "eval --help"
	"$exe" eval nothing.h5 >out.txt 2>&1 && fail "eval of a missing file"
	grep -q "nothing.h5" out.txt || fail "eval message: $(cat out.txt)"
	;;
mix)
	# Difficulty-mixed batches (docs/data-mix.md) on a corpus of 40
	# documents, half repetitive and half random letters: scored once,
	# trained at 1 and 2 ranks to the same losses, the mix in the run's
	# config and the score file in its data fingerprint; refusals name the
	# key or the file.
	awk 'BEGIN { srand(3); for (d = 0; d < 40; d++) { if (d) printf "\n\n";
		for (i = 0; i < 900 + 7 * d; i++) printf "%c", d % 2 ? 97 + int(26 * rand()) : (i % 2 ? 98 : 97) } }' >docs.txt
	expect 2 "data.batch=7: expected \[data\] batch to be even" "$exe" "$config" data.source=docs.txt data.mix=difficulty \
		data.batch=7 --quiet run.out=odd
	nothing_left odd
	expect 1 "mode-exp score docs.txt" "$exe" "$config" data.source=docs.txt data.mix=difficulty \
		--quiet run.out=none
	expect 2 "no document boundaries" "$exe" "$config" data.mix=difficulty --quiet run.out=syn
	expect 0 "40 documents" "$exe" score docs.txt
	[ -s docs.txt.difficulty ] || fail "no docs.txt.difficulty"
	for n in 1 2; do run "x$n" "$n" data.source=docs.txt data.mix=difficulty; done
	"$compare" x1/tiny/run.h5 x2/tiny/run.h5 1e-4 || fail "mix: -n 1 and -n 2 differ"
	h5dump -a config x1/tiny/run.h5 | grep -q "mix = difficulty" || fail "the mix is not in the config"
	h5dump x1/tiny/run.h5 | grep -q "difficulty docs.txt.difficulty" ||
		fail "the score file is not in the data fingerprint"
	# uniform batches on the same corpus differ, and say nothing of a mix
	run u 1 data.source=docs.txt
	"$compare" x1/tiny/run.h5 u/tiny/run.h5 0 >/dev/null 2>&1 && fail "the mix changed nothing"
	h5dump -a config u/tiny/run.h5 | grep -q "mix" && fail "a uniform run's config names a mix"
	# the corpus changed under its scores: stale
	printf 'more' >>docs.txt
	expect 1 "stale" "$exe" "$config" data.source=docs.txt data.mix=difficulty --quiet run.out=st
	;;
sched)
	# MoD's capacity schedule and fitted threshold (docs/kinds/mod-schedule.md):
	# each schedule trains, its checkpoint holds the threshold, evaluation
	# and decoding take the threshold rule; the run file's nominal FLOPs
	# follow the schedule (the first step's above the last's) and a budget
	# buys fewer steps with the schedule's fuller early steps than without
	mods='model.layers=(dense, mod) x 2'
	for s in linear cosine; do
		run "$s" 1 "$mods" mod.capacity=0.25 mod.causal=threshold \
			mod.capacity_schedule=$s mod.schedule_steps=12
		h5ls "$s/tiny/ckpt.h5/layers/1" | grep -q "^threshold .*{1}" || fail "$s: no threshold"
		"$exe" eval "$s/tiny/ckpt.h5" --mode causal >e.txt || fail "$s: eval threshold"
		grep -q "(causal)" e.txt || fail "$s: eval: $(cat e.txt)"
		"$exe" sample "$s/tiny/ckpt.h5" --prompt "?K=" --tokens 8 --bench 2 >b.txt ||
			fail "$s: sample --bench"
		grep -q "# layer 1 (mod): .* took the block" b.txt || fail "$s: sample report"
		f=$(h5dump -d metrics/train_flops "$s/tiny/run.h5" | tr -s ' ,' '\n\n' |
			grep -E '^[0-9.]+e\+[0-9]+$') || fail "$s: train_flops"
		first=$(echo "$f" | sed -n 1p) second=$(echo "$f" | sed -n 2p)
		l1=$(echo "$f" | tail -n 2 | sed -n 1p) l2=$(echo "$f" | tail -n 1)
		awk -v a="$first" -v b="$second" -v c="$l1" -v d="$l2" \
			'BEGIN { exit !(b - a > 1.3 * (d - c)) }' || fail "$s: nominal FLOPs ignore the schedule"
	done
	steps() { "$exe" flops "$config" "$mods" mod.capacity=0.25 run.flops_budget=2e9 "$@" |
		sed -n 's/^training steps *\([0-9]*\).*/\1/p'; }
	plain=$(steps) sched=$(steps mod.capacity_schedule=linear mod.schedule_steps=12)
	[ -n "$plain" ] && [ -n "$sched" ] && [ "$sched" -lt "$plain" ] ||
		fail "budget steps: $sched with the schedule, $plain without"
	"$exe" "$config" "$mods" mod.capacity_schedule=linear run.out=bad >out.txt 2>&1 &&
		fail "a schedule of no steps ran"
	grep -q "schedule_steps" out.txt || fail "refusal: $(cat out.txt)"
	;;
batch)
	# Batched decoding (sample --batch B, docs/decoding.md): sequence 1 of a
	# batch draws as a sequence alone does, so its text is the one-sequence
	# text for the same seed (dense, MoD, staged MoDE, token-choice MoD,
	# Cross-Layer Attention, MoE, expert-choice experts, recursion,
	# attention residual, early exit; MoD's share report;
	# --routing random);
	# sequences differ from each other; the
	# benchmark's rounds; an exit model keeps its lanes in a forward's rows
	# (data.seq_len of them here) and refuses more, naming the layer; --batch
	# 0 and --batch with --speculative are refused
	for k in 'dense x 2' 'dense, mod' 'dense, staged' 'dense, tcmod' 'dense, cla' 'dense, moe' \
		'dense, ec' 'dense, mor' 'dense, attnres, attnres' 'dense, exit, dense, dense'; do
		d=$(echo "$k" | tr -dc 'a-z')
		case $k in *exit*) run "$d" 1 "model.layers=$k" exit.threshold=0.3;;
			*x*|*tcmod*|*cla|*moe|*ec|*mor|*attnres) run "$d" 1 "model.layers=$k";;
			*) run "$d" 1 "model.layers=$k" mod.capacity=0.25;; esac
		one=$("$exe" sample "$d/tiny/ckpt.h5" --prompt "?K=" --tokens 12 --seed 5 --ids) ||
			fail "$k: sample"
		"$exe" sample "$d/tiny/ckpt.h5" --prompt "?K=" --tokens 12 --seed 5 --ids --batch 5 \
			--bench 1 >b.txt || fail "$k: sample --batch 5"
		first=$(sed -n '2p' b.txt)
		[ "$first" = "$(echo "$one" | sed -n 1p)" ] ||
			fail "$k: sequence 1 of the batch '$first', alone '$(echo "$one" | sed -n 1p)'"
		[ "$(grep -c '^# sequence [1-5] of 5$' b.txt)" = 5 ] || fail "$k: $(cat b.txt)"
		[ "$(grep -A1 '^# sequence' b.txt | grep -v '^#' | grep -v '^--' | sort -u | wc -l)" -ge 3 ] ||
			fail "$k: the sequences of a batch are alike: $(cat b.txt)"
		grep -q "^# decode benchmark: 1 rounds of batch 5, 60 generated tokens" b.txt ||
			fail "$k: benchmark: $(cat b.txt)"
		case $k in *mod*|*staged*)
			grep -q "^# layer 1 ([a-z]*): [0-9]* of 55 generated tokens took the block" b.txt ||
				fail "$k: share report: $(cat b.txt)";;
		esac
	done
	"$exe" sample densemod/tiny/ckpt.h5 --prompt "?K=" --tokens 6 --batch 3 --routing random \
		>r.txt 2>&1 || fail "--routing random: $(cat r.txt)"
	grep -q "^# routing decisions: random" r.txt || fail "--routing random: $(cat r.txt)"
	run exit 1 'model.layers=dense, exit, dense'
	expect 1 "layer 1 (exit) decodes at most 32 sequences at once" \
		"$exe" sample exit/tiny/ckpt.h5 --prompt "?K=" --tokens 4 --batch 33
	expect 2 "expected sequences decoded at once, 1..1024" \
		"$exe" sample densex/tiny/ckpt.h5 --prompt "?K=" --tokens 4 --batch 0
	expect 2 "not with --speculative" \
		"$exe" sample exit/tiny/ckpt.h5 --prompt "?K=" --tokens 4 --batch 2 --speculative auto \
		--temperature 0
	;;
mod)
	# MoD layers: statistics, routing records, both eval modes, sampling
	run m 2 'model.layers=(dense, mod) x 2' mod.capacity=0.25
	ls=$(h5ls -r m/tiny/run.h5) || fail "h5ls"
	for d in layer_stats/1/recall layer_stats/3/causal_capacity routing/tokens routing/labels \
		routing/step_000012/layer_1/selected routing/step_000024/layer_3/scores \
		routing/step_000024/layer_3/causal; do
		echo "$ls" | grep -q "^/$d " || fail "run.h5 has no /$d"
	done
	h5ls m/tiny/ckpt.h5/layers/1/router | grep -q "{32}" || fail "router shape"
	h5dump -a layers/1/capacity m/tiny/ckpt.h5 | grep -q "0.25" || fail "capacity attribute"
	t=$("$exe" eval m/tiny/ckpt.h5 --mode topk --json) || fail "eval topk"
	c=$("$exe" eval m/tiny/ckpt.h5 --mode causal --json) || fail "eval causal"
	echo "$t $c"
	out=$("$exe" sample m/tiny/ckpt.h5 --prompt "?K=" --tokens 20 --seed 2) || fail "sample"
	echo "$out"
	echo "$out" | grep -q "# 20 tokens generated" || fail "sample count"
	echo "$out" | grep -q "# layer 1 (mod): .* took the block .*capacity 25.0%" || fail "sample report"
	# the random-routing control runs and has no router tensor
	run r 1 'model.layers=(dense, mod) x 2' mod.router=random
	h5ls -r r/tiny/ckpt.h5 | grep -q router && fail "random routing has a router tensor"
	"$exe" sample r/tiny/ckpt.h5 --prompt "ab" --tokens 5 >/dev/null || fail "sample random"
	;;
moe)
	# Expert parallelism: 4 experts on 1, 2, 4 ranks (1 or 2 experts a rank)
	# and 8 ranks (2 groups of 4): the same losses within float rounding and
	# exactly the same tokens per expert and drops, for moe, staged and
	# integrated layers.
	layers='model.layers=(dense, moe, staged, integrated)'
	for n in 1 2 4 8; do
		run "e$n" "$n" "$layers" moe.experts=4 moe.capacity_factor=1.0 mod.capacity=0.5
	done
	for n in 2 4 8; do
		"$compare" e1/tiny/run.h5 "e$n/tiny/run.h5" 1e-5 1e-3 || fail "-n 1 and -n $n differ"
		for l in 1 2 3; do
			for c in tokens_0 tokens_1 tokens_2 tokens_3 dropped; do
				h5dump -d "layer_stats/$l/$c" e1/tiny/run.h5 | sed 1d >a.txt
				h5dump -d "layer_stats/$l/$c" "e$n/tiny/run.h5" | sed 1d >b.txt
				cmp -s a.txt b.txt || fail "layer $l $c differs between -n 1 and -n $n"
			done
		done
	done
	# Each rank holds, updates and writes only its own experts
	# (core/train/shard.h, core/io/checkpoint.h); the one file they write
	# holds the whole tensors: those of 2, 4 and 8 ranks are those of 1
	# within float rounding (parameters and moments, relative to each
	# tensor's largest value: sums in another order move gradients by up to
	# 1e-4 at a near-tie of the routing (the grad_norm tolerance above), the
	# second moments, of their squares, by 2e-4 seen; 1e-3 allowed, while a
	# stale or misplaced expert is off by the order of its own size: 24
	# Adam steps of lr 3e-3 against weights of 0.02).
	for n in 2 4 8; do
		"$compare" --tensors e1/tiny/ckpt.h5 "e$n/tiny/ckpt.h5" 1e-3 ||
			fail "the checkpoint of $n ranks is not that of 1"
	done
	# resuming from it at the same rank count is the uninterrupted run, bit
	# for bit; at another (the experts re-sharded: 2 -> 8, 8 -> 2, 4 -> 1)
	# within float rounding (the tolerances of the -n comparisons above)
	for n in 2 4; do
		run "c$n" "$n" "$layers" moe.experts=4 moe.capacity_factor=1.0 mod.capacity=0.5 \
			--max-steps 10
		run "c$n" "$n" "$layers" moe.experts=4 moe.capacity_factor=1.0 mod.capacity=0.5 --resume
		"$compare" "e$n/tiny/run.h5" "c$n/tiny/run.h5" 0 || fail "resumed -n $n moe run differs"
	done
	for pair in 2:8 8:2 4:1; do
		from=${pair%:*} to=${pair#*:}
		run "x$from$to" "$from" "$layers" moe.experts=4 moe.capacity_factor=1.0 \
			mod.capacity=0.5 --max-steps 10
		run "x$from$to" "$to" "$layers" moe.experts=4 moe.capacity_factor=1.0 \
			mod.capacity=0.5 --resume
		"$compare" e1/tiny/run.h5 "x$from$to/tiny/run.h5" 1e-5 1e-3 ||
			fail "written at $from ranks, resumed at $to: not the uninterrupted run"
	done
	h5dump -d layer_stats/3/tokens_noop e1/tiny/run.h5 >/dev/null || fail "no tokens_noop"
	h5ls e1/tiny/ckpt.h5/layers/3/gate | grep -q "{32, 5}" || fail "integrated gate shape"
	h5ls e1/tiny/ckpt.h5/layers/1/experts_w1 | grep -q "{4, 32, 64}" || fail "experts_w1 shape"
	h5ls -r e1/tiny/run.h5 | grep -q "step_000024/layer_2/experts " || fail "staged record"
	out=$("$exe" sample e1/tiny/ckpt.h5 --prompt "ab" --tokens 8) || fail "sample moe"
	echo "$out" | grep -q "# layer 2 (staged)" || fail "sample report: $out"
	# communication is accounted: bytes sent per step at 4 ranks
	h5dump -d metrics/comm_bytes e4/tiny/run.h5 | grep -q "[1-9]" || fail "no comm bytes"
	# a rank count the experts cannot be spread over is refused
	mpirun -n 3 "$exe" "$config" "$layers" moe.experts=4 data.batch=6 --quiet 2>err.txt &&
		fail "4 experts on 3 ranks accepted"
	grep -q "moe.experts=4: expected a multiple or a divisor of the 3 ranks" err.txt ||
		fail "experts/ranks message: $(cat err.txt)"
	;;
plan)
	# mode-exp plan counts without allocating: its parameter state is what
	# bench allocates (bench pads each tensor to 16 floats: within 1%), the
	# experts' share falls as 1/P, and a rank count the experts cannot be
	# spread over is refused
	layers='model.layers=dense, moe, staged'
	value() { echo "$1" | sed "s/.*\"$2\": \([0-9.e+]*\).*/\1/"; }
	p1=$("$exe" plan "$config" "$layers" moe.experts=8 --json) || fail "plan"
	p4=$("$exe" plan "$config" "$layers" moe.experts=8 --ranks 4 --json) || fail "plan --ranks 4"
	b1=$("$exe" bench "$config" "$layers" moe.experts=8 --steps 2 --json) || fail "bench"
	echo "$p1"
	echo "$b1"
	awk -v a="$(value "$p1" shared_state_mb)" -v b="$(value "$p1" expert_state_mb)" \
		-v m="$(value "$b1" param_state_mb)" 'BEGIN { d = (a + b - m) / m; exit !(d < 0.01 && d > -0.01) }' ||
		fail "plan's parameter state differs from bench's"
	awk -v a="$(value "$p1" expert_state_mb)" -v b="$(value "$p4" expert_state_mb)" \
		'BEGIN { exit !(b > 0 && a / b > 3.99 && a / b < 4.01) }' || fail "experts at 4 ranks are not a quarter"
	"$exe" plan "$config" "$layers" moe.experts=8 data.batch=6 --ranks 3 >out.txt 2>&1 &&
		fail "3 ranks for 8 experts"
	grep -q "expected a multiple or a divisor of the 3 ranks" out.txt || fail "plan message: $(cat out.txt)"
	;;
shard)
	# [optim] shard (ZeRO stage 1, docs/sharding.md): each rank keeps the Adam
	# moments of 1/P of the shared tensors, the gradients reduce-scattered,
	# the parameters all-gathered.  The reduce-scatter sums in another order
	# than the all-reduce, so the losses agree to float rounding (5.6e-9 and
	# gradient norms 6.5e-6 seen at 4 ranks; at 2 a sum of two is the same
	# either way: the losses are equal), not to the bit; dense and moe (the
	# experts keep their own moments beside the sharded shared ones).
	for k in 2 4; do
		run "u$k" "$k"
		run "s$k" "$k" optim.shard=true
		"$compare" "u$k/tiny/run.h5" "s$k/tiny/run.h5" 1e-7 1e-4 || fail "sharded -n $k differs"
		"$compare" --tensors "u$k/tiny/ckpt.h5" "s$k/tiny/ckpt.h5" 1e-4 ||
			fail "sharded -n $k: the checkpoint's moments differ"
	done
	"$compare" u2/tiny/run.h5 s2/tiny/run.h5 0 none || fail "sharded -n 2: the losses differ"
	moe='model.layers=dense, moe'
	run um 4 "$moe" moe.experts=4
	run sm 4 "$moe" moe.experts=4 optim.shard=true
	"$compare" um/tiny/run.h5 sm/tiny/run.h5 1e-6 1e-3 || fail "sharded moe differs"
	# One file that resumes at any rank count: cut at step 10 of 4 sharded
	# ranks (every rank wrote its pieces of the moments), resumed at 4 (the
	# same bits as the uninterrupted run), at 2 and at 1 (rounding).
	for k in 4 2 1; do # (run sets n)
		run "c$k" 4 optim.shard=true --max-steps 10
		run "c$k" "$k" optim.shard=true --resume
	done
	"$compare" s4/tiny/run.h5 c4/tiny/run.h5 0 || fail "resumed at 4 ranks differs"
	"$compare" --tensors s4/tiny/ckpt.h5 c4/tiny/ckpt.h5 0 || fail "resumed checkpoint differs"
	for k in 2 1; do
		"$compare" s4/tiny/run.h5 "c$k/tiny/run.h5" 1e-7 1e-4 || fail "resumed at $k ranks differs"
	done
	# plan: the moments a rank keeps fall as 1/P; bench measures them resident
	# (what freeing them gives back), at 4 ranks at most 0.3 of one rank's
	value() { echo "$1" | sed "s/.*\"$2\": \([0-9.e+]*\).*/\1/"; }
	wide='model.d_model=128 model.d_ff=512'
	p1=$("$exe" plan "$config" $wide --json) || fail "plan"
	p4=$("$exe" plan "$config" $wide optim.shard=true --ranks 4 --json) || fail "plan --ranks 4"
	b1=$("$exe" bench "$config" $wide --steps 1 --json) || fail "bench"
	b4=$(mpirun -n 4 "$exe" bench "$config" $wide optim.shard=true --steps 1 --json) ||
		fail "bench -n 4"
	echo "$p1"; echo "$p4"; echo "$b1"; echo "$b4"
	ratio() { # JSON1 JSON4 KEY: 4 ranks' value over one rank's, at most 0.3
		awk -v a="$(value "$1" "$3")" -v b="$(value "$2" "$3")" \
			'BEGIN { exit !(a > 0 && b > 0 && b / a <= 0.3) }' || fail "$3 at 4 ranks is not 1/4"
	}
	ratio "$p1" "$p4" shared_optim_mb
	ratio "$b1" "$b4" optim_state_mb
	# (the sanitizers' allocator keeps what is freed: nothing to measure there)
	[ -n "$sanitized" ] || ratio "$b1" "$b4" optim_resident_mb
	;;
bench)
	out=$("$exe" bench "$config" --steps 2 --json) || fail "bench"
	echo "$out"
	for k in tokens_per_s gflops_nominal gflops_executed sgemm_gflops ratio_nominal peak_rss_mb \
		attention_s routing_s; do
		echo "$out" | grep -q "\"$k\": [0-9]" || fail "bench json has no $k"
	done
	mpirun -n 2 "$exe" bench "$config" 'model.layers=(dense, mod) x 2' --steps 2 | grep -q "steps/s" ||
		fail "bench -n 2"
	# cla's key-value cache (docs/kinds/cla.md, issue 45): sample --bench
	# measures the decoding caches' bytes a position at the allocator; a
	# group of two keeps half the plain stack's caches
	for layers in 'dense, dense' 'dense, cla'; do
		stack=$(echo "$layers" | tr -dc a-z)
		run "$stack" 1 "model.layers=$layers" run.steps=2
		"$exe" sample "$stack/tiny/ckpt.h5" --prompt "ab" --tokens 4 --bench 1 >"$stack.txt" ||
			fail "$stack: sample --bench"
		sed -n 's/^# decode benchmark: key-value cache \([0-9.]*\) bytes a position.*/\1/p' \
			"$stack.txt" >"$stack.bytes"
		[ -s "$stack.bytes" ] || fail "$stack: sample --bench prints no cache bytes: $(cat "$stack.txt")"
	done
	plain=$(cat densedense.bytes) cla=$(cat densecla.bytes)
	echo "key-value cache a position: dense, dense $plain bytes; dense, cla $cla"
	awk -v p="$plain" -v c="$cla" 'BEGIN { r = c / p; exit !(p > 0 && r > 0.49 && r < 0.51) }' ||
		fail "cla's cache is not half the plain stack's: $cla against $plain bytes"
	;;
keys)
	# the README's table of declared keys is what the declarations print:
	# it cannot drift from the code
	readme=$(dirname "$config")/../../README.md
	sed -n '/^<!-- keys: mode-exp --help-keys --markdown -->$/,/^<!-- \/keys -->$/p' "$readme" |
		sed '1d;$d' >want.md
	[ -s want.md ] || fail "no generated key table in $readme"
	"$exe" --help-keys --markdown >got.md || fail "--help-keys --markdown"
	diff want.md got.md || fail "README's key table differs from mode-exp --help-keys --markdown"
	"$exe" --help-keys | grep -q "^\[moe\] (read by moe, integrated, staged)" || fail "--help-keys"
	;;
routing)
	# Counterfactual routing (docs/instruments.md) on a trained MoD model:
	# its own decisions replayed, from an eval --record file and from the
	# run's routing records, give its loss bit for bit on every window; the
	# other policies give paired differences; two ranks give the numbers of
	# one (the draws are keyed by window); bad requests are refused
	run m 1 'model.layers=(dense, mod) x 2' mod.capacity=0.25
	ck=m/tiny/ckpt.h5
	"$exe" eval $ck --mode topk --windows 32 --routing random,bottom,shuffle --record rec.h5 \
		--json >cf.txt || fail "eval --routing"
	cat cf.txt
	[ "$(grep -c '"policy"' cf.txt)" -eq 4 ] || fail "four arms"
	grep '"policy": "random"' cf.txt | grep -q '"identical_windows": 0,' ||
		fail "random left every window as it was"
	for src in rec.h5 m/tiny/run.h5; do
		"$exe" eval $ck --mode topk --windows 32 --routing replay:$src --json >rp.txt ||
			fail "replay:$src"
		grep '"policy": "replay"' rp.txt | grep -q '"diff": 0, .*"identical_windows": 32,' ||
			fail "replay:$src is not the learned loss bit for bit: $(cat rp.txt)"
	done
	"$exe" eval $ck --mode topk --windows 8 --routing replay:m/tiny/run.h5@12 >/dev/null ||
		fail "replay of step 12's records"
	a=$(grep '"policy": "random"' cf.txt | sed 's/.*"loss": \([^,]*\),.*/\1/')
	b=$(mpirun -n 2 "$exe" eval $ck --mode topk --windows 32 --routing random --json |
		grep '"policy": "random"' | sed 's/.*"loss": \([^,]*\),.*/\1/')
	awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-5 * a) }' ||
		fail "random on 2 ranks $b, on 1 $a"
	refused() { # code message args...
		code=$1 msg=$2
		shift 2
		"$exe" "$@" >out.txt 2>err.txt
		rc=$?
		[ $rc -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat err.txt)"
		grep -q -- "$msg" err.txt || fail "$*: $(cat err.txt); expected: $msg"
	}
	refused 2 "layer 0 (dense) does not take it" eval $ck --routing random --routing-layers 0
	refused 2 "no layer of this model (dense, mod) takes it" eval $ck --routing noop-all
	refused 2 "expected a list of learned, random" eval $ck --routing sideways
	refused 2 "give --mode topk" eval $ck --routing bottom
	refused 1 "not window" eval $ck --mode topk --windows 100 --routing replay:rec.h5
	refused 1 "changes the tensors of layer 1 (mod)" eval $ck mod.router=random
	refused 1 "change only the kinds' keys" eval $ck bogus.key=1
	refused 1 "change only the kinds' keys" eval $ck data.batch=4
	refused 1 "in decoding" sample $ck --prompt "The " --tokens 4 --routing bottom
	# the dial: a kind's key changed for evaluation, checked like a config's
	refused 1 "expected a number in (0, 1]" eval $ck mod.capacity=2
	lo=$("$exe" eval $ck --mode topk --windows 16 mod.capacity=0.125 --json)
	hi=$("$exe" eval $ck --mode topk --windows 16 mod.capacity=1 --json)
	fl() { echo "$1" | sed 's/.*"flops_per_token": \([^,}]*\).*/\1/'; }
	awk -v a="$(fl "$lo")" -v b="$(fl "$hi")" 'BEGIN { exit !(a < b) }' ||
		fail "capacity 1 does not cost more than 0.125: $lo / $hi"
	"$exe" sample $ck --prompt "The " --tokens 8 --routing random >s.txt || fail "sample --routing"
	grep -q "routing decisions: random" s.txt || fail "sample does not say its routing"
	"$exe" sample $ck --prompt "The " --tokens 8 mod.causal_threshold=1000 >s.txt ||
		fail "sample with a dial"
	grep -q "layer 1 (mod): 0 of 7 generated tokens took the block" s.txt ||
		fail "a threshold no score passes still takes tokens: $(cat s.txt)"
	# the expert kinds' controls: no gate tensor, trains on one and two ranks alike
	for r in random hash; do
		run "h$r" 1 'model.layers=dense, integrated' moe.router=$r moe.experts=2
		run "h${r}2" 2 'model.layers=dense, integrated' moe.router=$r moe.experts=2
		"$compare" "h$r/tiny/run.h5" "h${r}2/tiny/run.h5" 1e-4 >/dev/null ||
			fail "moe.router=$r: 2 ranks differ from 1"
		h5ls -r "h$r/tiny/ckpt.h5" | grep -q "layers/1/gate" && fail "$r keeps a gate tensor"
		h5dump -a layers/1/router "h$r/tiny/ckpt.h5" | grep -q "\"$r\"" || fail "router attribute"
	done
	;;
executed)
	# run.flops_count = executed: the steps re-planned from the FLOPs the
	# routing ran, so that integrated MoDE's no-op tokens buy steps; the
	# spending ends within half a step of the budget (0.6% at these 90
	# steps: within 1%); resumed, the same run bit for bit; two ranks, the
	# same steps.  Under the sanitizers half the budget (the same checks
	# but the 1%, which 45 steps cannot reach)
	cfg='model.layers=dense, integrated'
	budget=4e9
	[ -n "$sanitized" ] && budget=2e9
	run x 1 "$cfg" run.steps=0 run.flops_budget=$budget run.flops_count=executed
	run n 1 "$cfg" run.steps=0 run.flops_budget=$budget
	# the no-op dial (integrated.noop_bias): 0 is the model as trained;
	# 1e6 sends every token to the no-op and -1e6 none, which is what the
	# noop-all and noop-none policies evaluate: the same losses and FLOPs
	# (equal by construction: the same expert rows and weights, or none)
	ev() { "$exe" eval x/tiny/ckpt.h5 --mode topk --windows 16 --json "$@"; }
	lf() { sed 's/.*"loss": \([^,]*\),.*"flops_per_token": \([^,}]*\).*/\1 \2/'; }
	pol=$(ev --routing noop-all,noop-none)
	[ "$(ev integrated.noop_bias=0 | lf)" = "$(echo "$pol" | grep '"learned"' | lf)" ] ||
		fail "noop_bias 0 is not the trained model"
	[ "$(ev integrated.noop_bias=1e6 | lf)" = "$(echo "$pol" | grep '"noop-all"' | lf)" ] ||
		fail "noop_bias 1e6 is not noop-all: $(ev integrated.noop_bias=1e6) / $pol"
	[ "$(ev integrated.noop_bias=-1e6 | lf)" = "$(echo "$pol" | grep '"noop-none"' | lf)" ] ||
		fail "noop_bias -1e6 is not noop-none"
	"$exe" eval x/tiny/ckpt.h5 --windows 4 integrated.noop_bias=0.5 moe.experts=2 >/dev/null 2>err.txt &&
		fail "a dial that changes the tensors accepted"
	"$exe" eval n/tiny/ckpt.h5 --windows 4 mod.capacity=0.5 >/dev/null 2>err.txt &&
		fail "a key no layer of the model reads accepted"
	grep -q "no layer of this model (dense, integrated) reads \[mod\]" err.txt || fail "$(cat err.txt)"
	spent=$(h5dump -a train_flops_executed x/tiny/ckpt.h5 | sed -n 's/.*(0): \(.*\)/\1/p')
	nsteps=$(h5dump -d metrics/step x/tiny/run.h5 | grep -o '[0-9]*' | tail -n 1)
	awk -v s="$spent" -v b="$budget" -v n="$nsteps" 'BEGIN { d = s - b; if (d < 0) d = -d;
		exit !(d <= 0.5 * s / n * 1.05) }' || fail "spent $spent of $budget: more than half a step off"
	[ -n "$sanitized" ] ||
		awk -v s="$spent" 'BEGIN { d = s / 4e9 - 1; if (d < 0) d = -d; exit !(d < 0.01) }' ||
		fail "spent $spent of a budget of 4e9"
	steps() { h5dump -d metrics/step "$1" | grep -o '[0-9]*' | tail -n 1; }
	[ "$(steps x/tiny/run.h5)" -gt "$(steps n/tiny/run.h5)" ] ||
		fail "executed counting bought no steps: $(steps x/tiny/run.h5) vs $(steps n/tiny/run.h5)"
	run y 1 "$cfg" run.steps=0 run.flops_budget=$budget run.flops_count=executed --max-steps 30
	run y 1 "$cfg" run.steps=0 run.flops_budget=$budget run.flops_count=executed --resume
	"$compare" x/tiny/run.h5 y/tiny/run.h5 0 >/dev/null || fail "resumed differs"
	run z 2 "$cfg" run.steps=0 run.flops_budget=$budget run.flops_count=executed
	[ "$(steps z/tiny/run.h5)" = "$(steps x/tiny/run.h5)" ] || fail "two ranks plan other steps"
	# the schedule ends at the run's last step: near its floor (3e-4) there
	# and still falling five steps before; one planned on the nominal steps
	# (fewer) would sit at the floor for the run's last tenth
	lrs=$(h5dump -d metrics/lr -m '%.9g' x/tiny/run.h5 | sed -n '/DATA {/,/}/p' | tr -s ' ,' '\n' |
		grep -E '^[0-9.]+(e-?[0-9]+)?$')
	last=$(echo "$lrs" | tail -n 1) before=$(echo "$lrs" | tail -n 6 | head -n 1)
	awk -v l="$last" -v b="$before" 'BEGIN { exit !(l < 3.3e-4 && b > 3.06e-4 && b > l) }' ||
		fail "the lr ends at $last (five steps before: $before): the schedule does not end at the last step"
	;;
balance)
	# The MoE routing options of today's recipes at once (sigmoid scores,
	# renormalised weights, a balance loss over the global batch, the
	# balancing bias, a shared expert, experts split in 2, dropless
	# evaluation) in moe, staged and integrated layers: -n 2 and -n 8 (two
	# groups of the 8 split experts... one each) train as -n 1 does within
	# float rounding (the tolerances of the moe test), with the same tokens
	# per expert and the same bias, which moves only by whole steps of
	# bias_rate on counts summed over ranks.
	layers='model.layers=(dense, moe, staged, integrated)'
	opts='moe.experts=4 moe.score=sigmoid moe.renormalize=true moe.balance_scope=batch
		moe.bias_rate=0.01 moe.shared_experts=1 moe.granularity=2 moe.eval_capacity_factor=0
		mod.capacity=0.5'
	for n in 1 2 8; do run "b$n" "$n" "$layers" $opts; done
	for n in 2 8; do
		"$compare" b1/tiny/run.h5 "b$n/tiny/run.h5" 1e-5 1e-3 || fail "-n 1 and -n $n differ"
		for l in 1 2 3; do
			for c in tokens_0 tokens_7 bias_0 bias_5 maxvio shared_share; do
				h5dump -d "layer_stats/$l/$c" b1/tiny/run.h5 | sed 1d >a.txt
				h5dump -d "layer_stats/$l/$c" "b$n/tiny/run.h5" | sed 1d >b.txt
				[ "$c" = shared_share ] || [ "$c" = maxvio ] || cmp -s a.txt b.txt ||
					fail "layer $l $c differs between -n 1 and -n $n"
			done
		done
	done
	# the bias moved, by whole steps of bias_rate (0.01), from 0
	b=$(h5dump -d layer_stats/1/bias_0 -m '%.6f' b1/tiny/run.h5 | sed -n '/DATA {/,/}/p' |
		tr -s ' ,' '\n' | grep -E '^-?[0-9]+\.[0-9]+$' | tail -n 1)
	awk -v b="$b" 'BEGIN { r = b / 0.01; exit !(b != 0 && (r - int(r) < 1e-3 || int(r) - r > -1e-3)) }' ||
		fail "bias_0 ends at $b: not a nonzero multiple of bias_rate"
	h5ls b1/tiny/ckpt.h5/layers/1/experts_w1 | grep -q "{8, 32, 32}" ||
		fail "granularity 2: experts_w1 is not [8][32][32]"
	h5ls b1/tiny/ckpt.h5/layers/1/shared_w1 | grep -q "{32, 32}" || fail "shared_w1 shape"
	h5ls b1/tiny/ckpt.h5/layers/1/expert_bias | grep -q "{8}" || fail "expert_bias shape"
	# resuming is the uninterrupted run, bit for bit (the bias is in the checkpoint)
	run c2 2 "$layers" $opts --max-steps 10
	run c2 2 "$layers" $opts --resume
	"$compare" b2/tiny/run.h5 c2/tiny/run.h5 0 || fail "resumed run differs"
	# granularity 3 does not divide d_ff 64: refused naming the key
	mpirun -n 1 "$exe" "$config" "$layers" moe.granularity=3 --quiet 2>err.txt &&
		fail "granularity 3 of d_ff 64 accepted"
	grep -q "granularity" err.txt || fail "granularity refusal: $(cat err.txt)"
	# 3 experts split in 2 (6) on 4 ranks: refused, naming the 6
	mpirun -n 4 "$exe" "$config" "$layers" moe.experts=3 moe.granularity=2 --quiet 2>err.txt &&
		fail "6 experts on 4 ranks accepted"
	grep -q "6 experts" err.txt || fail "rank refusal: $(cat err.txt)"
	;;
upcycle)
	# A dense model's checkpoint starts a moe, staged and integrated model:
	# every expert a copy of its layer's dense MLP (split experts a slice of
	# its hidden units), the shared expert too, gates and routers fresh; the
	# same at 1 and 4 ranks (each rank reads its own experts).  lr 1e-30
	# keeps the parameters as they started (the Adam moments, of gradients
	# summed in another order, within the moe test's 1e-3; a misplaced
	# expert is off by its own size).
	run d 1 'model.layers=dense x 4' run.steps=8
	layers='model.layers=(dense, moe, staged, integrated)'
	for n in 1 4; do
		run "u$n" "$n" "$layers" moe.experts=4 moe.granularity=2 moe.shared_experts=1 \
			optim.lr=1e-30 run.steps=2 --init-from d/tiny/ckpt.h5
	done
	"$compare" --tensors u1/tiny/ckpt.h5 u4/tiny/ckpt.h5 1e-3 || fail "upcycled at 4 ranks differs"
	dump() { h5dump -d "$1" -s "$2" -c "$3" -m '%.7g' "$4" | sed -n '/DATA {/,/}/p' |
		sed 's/([0-9,]*)://' | tr -s ' ,\n' ' ' | sed 's/DATA { //; s/ } *$//'; }
	for l in 1 2 3; do
		# expert 3 of 8 (d_ff 64 split in 2: 32 wide) is the second half of w1
		a=$(dump "layers/$l/w1" "0,32" "32,32" d/tiny/ckpt.h5)
		b=$(dump "layers/$l/experts_w1" "3,0,0" "1,32,32" u1/tiny/ckpt.h5)
		[ -n "$a" ] && [ "$a" = "$b" ] || fail "layer $l: expert 3's w1 is not the dense w1's second half"
		a=$(dump "layers/$l/w2" "0,0" "32,32" d/tiny/ckpt.h5)
		b=$(dump "layers/$l/experts_w2" "2,0,0" "1,32,32" u1/tiny/ckpt.h5)
		[ "$a" = "$b" ] || fail "layer $l: expert 2's w2 is not the dense w2's first half"
		a=$(dump "layers/$l/wq" "0,0" "32,32" d/tiny/ckpt.h5)
		b=$(dump "layers/$l/wq" "0,0" "32,32" u1/tiny/ckpt.h5)
		[ "$a" = "$b" ] || fail "layer $l: attention not read"
	done
	# Drop-Upcycling: half of each expert's hidden units drawn afresh
	run r 1 "$layers" moe.experts=4 optim.lr=1e-30 run.steps=2 --init-from d/tiny/ckpt.h5 \
		--upcycle-reinit 0.5
	a=$(dump "layers/1/w1" "0,0" "32,64" d/tiny/ckpt.h5 | tr ' ' '\n')
	b=$(dump "layers/1/experts_w1" "0,0,0" "1,32,64" r/tiny/ckpt.h5 | tr ' ' '\n')
	same=$(paste -d' ' /dev/null /dev/null >/dev/null; printf '%s\n' "$a" >a.txt; printf '%s\n' "$b" >b.txt;
		paste a.txt b.txt | awk '$1 == $2' | wc -l)
	[ "$same" -ge 900 ] && [ "$same" -le 1150 ] ||
		fail "reinit 0.5 kept $same of 2048 weights of expert 0, expected about 1024"
	# a checkpoint of other widths is refused, naming the tensor
	mpirun -n 1 "$exe" "$config" "$layers" model.d_ff=32 --init-from d/tiny/ckpt.h5 --quiet \
		2>err.txt && fail "other widths accepted"
	grep -q "w1" err.txt || fail "width refusal: $(cat err.txt)"
	mpirun -n 1 "$exe" "$config" --upcycle-noise 0.1 --quiet 2>err.txt &&
		fail "--upcycle-noise without --init-from accepted"
	;;
tokens)
	# Subword tokens: a BPE tokenizer trained on the repository's own prose
	# (docs/*.md), the text as its tokens (round trip checked by tokenize),
	# training on them with the tokenizer recorded, sampling text through
	# it, evaluating a text file and bits per byte; bad tokenizers refused
	# before any training.
	cat "$src"/docs/*.md "$src"/README.md >corpus.txt
	"$exe" tokenize corpus.txt tok --vocab 512 >t.txt 2>&1 || fail "tokenize: $(cat t.txt)"
	[ -s tok.bin ] && [ -s tok.model ] || fail "tokenize wrote no tokens or model"
	tk='data.source=tok.bin data.vocab=512 data.tokenizer=tok.model'
	run s 2 $tk
	[ -s s/tiny/tokenizer.model ] || fail "the run kept no tokenizer beside its checkpoint"
	h5dump -a provenance/data s/tiny/run.h5 | grep -q "tokenizer tok.model: bytes" ||
		fail "the run did not record its tokenizer's fingerprint"
	b=$(h5dump -d eval/bpb_topk s/tiny/run.h5 | grep -o '[0-9]\.[0-9]*' | tail -n 1)
	[ -n "$b" ] || fail "no bits per byte in the run file"
	out=$("$exe" sample s/tiny/ckpt.h5 --prompt "The model" --tokens 12 2>&1) ||
		fail "sample: $out"
	echo "$out" | head -n 1 | grep -q "^The model" || fail "sample did not print text: $out"
	echo "$out" | grep -q "# tokenizer s/tiny/tokenizer.model" || fail "sample's tokenizer: $out"
	head -c 4000 "$src/README.md" >part.txt
	out=$("$exe" eval s/tiny/ckpt.h5 --data part.txt --windows 4 2>&1) || fail "eval text: $out"
	echo "$out" | grep -q "bits per byte" || fail "eval gave no bits per byte: $out"
	# byte-level runs have bits per byte too: nats / ln 2
	run y 1
	awk -v l="$(h5dump -d eval/loss_topk y/tiny/run.h5 | grep -o '[0-9]\.[0-9]*' | tail -n 1)" \
		-v b="$(h5dump -d eval/bpb_topk y/tiny/run.h5 | grep -o '[0-9]\.[0-9]*' | tail -n 1)" \
		'BEGIN { exit !(b > 0 && (l / log(2) - b) ^ 2 < 1e-6) }' || fail "byte-level bits per byte"
	# the decode benchmark: two timed sequences, tokens/s
	"$exe" sample y/tiny/ckpt.h5 --prompt ab --tokens 8 --bench 2 >b.txt 2>&1 || fail "bench: $(cat b.txt)"
	grep -q "decode benchmark: 2 sequences of batch 1, 16 generated tokens" b.txt ||
		fail "decode benchmark: $(cat b.txt)"
	# another tokenizer where the run's was: refused, naming both
	"$exe" tokenize corpus.txt other --vocab 600 >/dev/null 2>&1 || fail "tokenize 600"
	cp other.model s/tiny/tokenizer.model
	"$exe" sample s/tiny/ckpt.h5 --prompt "The" --tokens 4 2>err.txt && fail "a swapped tokenizer accepted"
	grep -q "is not the one the run used" err.txt || fail "swap message: $(cat err.txt)"
	# missing, corrupt, another vocabulary: stopped before training
	mpirun -n 1 "$exe" "$config" data.source=tok.bin data.vocab=512 data.tokenizer=none.model \
		--quiet 2>err.txt && fail "a missing tokenizer accepted"
	grep -q "none.model" err.txt || fail "missing: $(cat err.txt)"
	head -c 3000 tok.bin >bad.model
	mpirun -n 1 "$exe" "$config" data.source=tok.bin data.vocab=512 data.tokenizer=bad.model \
		--quiet 2>err.txt && fail "a corrupt tokenizer accepted"
	grep -q "not a SentencePiece model" err.txt || fail "corrupt: $(cat err.txt)"
	mpirun -n 1 "$exe" "$config" data.source=tok.bin data.vocab=600 data.tokenizer=tok.model \
		--quiet 2>err.txt && fail "a tokenizer of another vocabulary accepted"
	grep -q "has 512 pieces, data.vocab is 600" err.txt || fail "vocab: $(cat err.txt)"
	mpirun -n 1 "$exe" "$config" data.tokenizer=tok.model --quiet 2>err.txt &&
		fail "a tokenizer with a byte source accepted"
	grep -q "tokenizer" err.txt || fail "byte source: $(cat err.txt)"
	[ ! -d out/tiny ] || fail "a refused run left a folder"
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "ok: $test_name"
