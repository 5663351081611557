#!/bin/sh
# Ranks that disagree, and readers of files a live run is replacing
# (docs/robustness.md).
#   test_agree.sh TEST MODE_EXP CONFIG COMPARE_RUNS
# TEST: ranks | readers
#   ranks    MPMD jobs whose ranks read different corpora (MODE_DATA), held-out
#            files, configs, overrides, checkpoints or sweep files, in
#            training, bench, eval and sweep: every rank must end within the
#            timeout, exit 1, with one message naming the rank and the
#            difference (they used to print "step 24: " with no cause and
#            hang: rank 0 in MPI_Finalize, rank 1 in an all-reduce).
#   readers  eval (1 and 2 ranks), sample and --init-from of a checkpoint
#            that a run rewrites at every step: never "corrupted" (the seal
#            was checked through one open and the file read through another);
#            the run's record read (run.h5 and its pieces) while it writes a
#            piece at every step and then gathers them.
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") config=$(abspath "$3") compare=$(abspath "$4")
enter_workdir

# disagree PATTERN MPIRUN-ARGS...: every rank ends within 60 s (no hang:
# timeout's 124 fails), exit 1, and exactly one message, naming the rank
disagree() {
	pat=$1
	shift
	expect 1 "$pat" timeout 60 mpirun "$@"
	[ "$(grep -c 'mode-exp' out.txt)" -eq 1 ] || fail "not one message: $(cat out.txt)"
	grep -q "rank 1 read" out.txt || fail "the rank is not named: $(cat out.txt)"
}

case $test_name in
ranks)
	# two Brown folders (MODE_DATA): 404000 bytes and 15000, so 40400 and
	# 1500 tokens held out (val_fraction 0.1), labels beside them
	mkdir -p da db w1 w2 run
	head -c 300000 /dev/urandom | base64 | head -c 404000 >da/brown.txt
	head -c 404000 /dev/zero >da/brown.pos
	head -c 15000 da/brown.txt >db/brown.txt
	head -c 15000 /dev/zero >db/brown.pos
	# the same relative names in two working folders (mpirun --wdir): the
	# held-out file, the config and the checkpoint differ between them
	head -c 30000 da/brown.txt >w1/train.txt
	cp w1/train.txt w2/train.txt
	head -c 3000 da/brown.txt >w1/held.txt
	head -c 300 da/brown.txt >w2/held.txt
	cp "$config" w1/cfg.ini
	sed 's/^d_ff = 64/d_ff = 48/' "$config" >w2/cfg.ini
	"$exe" "$config" run.out="$work/run" run.steps=2 --quiet || fail "training"
	"$exe" "$config" run.out="$work/run2" run.steps=2 run.seed=8 --quiet || fail "training"
	cp run/tiny/ckpt.h5 w1/ckpt.h5
	cp run2/tiny/ckpt.h5 w2/ckpt.h5
	long=run.final_eval_windows=2048 # every held-out window: the counts differ
	# training
	disagree "rank 1 read data.source=.*db/brown.txt with 1500 tokens held out, rank 0 .*da/brown.txt with 40400 tokens held out" \
		-n 1 env MODE_DATA="$work/da" "$exe" "$config" data.source=brown run.out=o1 $long --quiet : \
		-n 1 env MODE_DATA="$work/db" "$exe" "$config" data.source=brown run.out=o1 $long --quiet
	disagree "rank 1 read data.source=train.txt with 300 tokens held out in held.txt, rank 0 data.source=train.txt with 3000" \
		-n 1 --wdir w1 "$exe" "$config" data.source=train.txt data.val_source=held.txt run.out=o2 --quiet : \
		-n 1 --wdir w2 "$exe" "$config" data.source=train.txt data.val_source=held.txt run.out=o2 --quiet
	disagree "rank 1 read config \[model\] d_ff = 48, rank 0 config \[model\] d_ff = 64" \
		-n 1 --wdir w1 "$exe" cfg.ini run.out=o3 --quiet : -n 1 --wdir w2 "$exe" cfg.ini run.out=o3 --quiet
	disagree "rank 1 read argument 2=data.source=w2/held.txt, rank 0 argument 2=data.source=w1/held.txt" \
		-n 1 "$exe" "$config" data.source=w1/held.txt run.out=o4 --quiet : \
		-n 1 "$exe" "$config" data.source=w2/held.txt run.out=o4 --quiet
	disagree "rank 1 read config \[model\] d_ff = 48, rank 0 config \[model\] d_ff = 64" \
		-n 1 --wdir w1 "$exe" bench cfg.ini --steps 1 : -n 1 --wdir w2 "$exe" bench cfg.ini --steps 1
	# eval
	ck="$work/run/tiny/ckpt.h5"
	disagree "rank 1 read data.source=.*db/brown.txt with 1500 tokens held out, rank 0 .*da/brown.txt with 40400" \
		-n 1 env MODE_DATA="$work/da" "$exe" eval "$ck" --data brown : \
		-n 1 env MODE_DATA="$work/db" "$exe" eval "$ck" --data brown
	disagree "rank 1 read data.source=held.txt with 300 tokens held out, rank 0 data.source=held.txt with 3000" \
		-n 1 --wdir w1 "$exe" eval "$ck" --data held.txt : -n 1 --wdir w2 "$exe" eval "$ck" --data held.txt
	disagree "rank 1 read argument 4=7, rank 0 argument 4=3" \
		-n 1 "$exe" eval "$ck" --windows 3 : -n 1 "$exe" eval "$ck" --windows 7
	disagree "rank 1 read ckpt.h5=[0-9]* bytes sealed with CRC-32 [0-9a-f]*, rank 0 ckpt.h5=" \
		-n 1 --wdir w1 "$exe" eval ckpt.h5 --windows 2 : -n 1 --wdir w2 "$exe" eval ckpt.h5 --windows 2
	# sweep: the same sweep file's name, another grid on rank 1
	printf '[sweep]\nbase = %s\nout = %s/sw\n[all]\nrun.steps = 2\n[grid]\nmodel.d_ff = 32, 64\n' \
		"$config" "$work" >w1/sweep.ini
	sed 's/32, 64/32, 48/' w1/sweep.ini >w2/sweep.ini
	disagree "rank 1 read sweep run 2=.*model.d_ff=48.*, rank 0 sweep run 2=.*model.d_ff=64" \
		-n 1 --wdir w1 "$exe" sweep sweep.ini --no-report : -n 1 --wdir w2 "$exe" sweep sweep.ini --no-report
	# the same inputs on both: no refusal
	timeout 60 mpirun -n 2 "$exe" eval "$ck" --windows 3 >out.txt 2>&1 ||
		fail "eval at 2 ranks on the same inputs: $(cat out.txt)"
	;;
readers)
	# a run that writes its checkpoint at every step (6.7 MB: its seal takes
	# a while to check), read meanwhile by every kind of reader
	live="run.out=live run.steps=100000 run.ckpt_every=1 run.eval_every=0 run.routing_every=0"
	big="model.d_model=128 model.d_ff=512"
	# shellcheck disable=SC2086
	"$exe" "$config" $live $big run.log_every=100000 --quiet >live.txt 2>&1 &
	pid=$!
	i=0
	while [ ! -e live/tiny/ckpt.h5 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	[ -e live/tiny/ckpt.h5 ] || fail "no checkpoint: $(cat live.txt)"
	ck=live/tiny/ckpt.h5
	bad=0
	check() { # a reader's outcome: exit 0, never "corrupted"
		if ! "$@" >r.txt 2>&1 || grep -q corrupted r.txt; then
			bad=$((bad + 1))
			echo "failed: $*: $(head -3 r.txt)"
		fi
	}
	n=40
	[ -n "$sanitized" ] && n=10
	i=0
	while [ $i -lt $n ]; do check "$exe" eval "$ck" --windows 2; i=$((i + 1)); done
	i=0
	while [ $i -lt 2 ]; do
		check timeout 60 mpirun -n 2 "$exe" eval "$ck" --windows 2
		check "$exe" sample "$ck" --prompt ab --tokens 3
		# shellcheck disable=SC2086
		check "$exe" "$config" $big run.out=init$i run.steps=1 --init-from "$ck" --quiet
		i=$((i + 1))
	done
	kill "$pid"
	wait "$pid"
	grep -q "stopped by signal 15" live.txt || fail "the live run: $(cat live.txt)"
	# the record of a run that writes a piece at every step, read until
	# after it has gathered them into run.h5 and removed them
	# shellcheck disable=SC2086
	"$exe" "$config" $big run.out=rec run.steps=60 run.ckpt_every=1 --quiet >rec.txt 2>&1 &
	pid=$!
	reads=0
	# from its first piece (before it, the record has no rows yet)
	while ! ls rec/tiny/records 2>/dev/null | grep -q '^step_.*\.h5$' && kill -0 "$pid" 2>/dev/null; do
		sleep 0.05
	done
	while kill -0 "$pid" 2>/dev/null || [ $reads -lt 3 ]; do
		check "$compare" --values rec/tiny/run.h5 metrics/step
		reads=$((reads + 1))
	done
	wait "$pid" || fail "the recorded run: $(cat rec.txt)"
	[ "$(tail -1 r.txt)" = 60 ] || fail "the gathered record: $(tail -3 r.txt)"
	n=$((n + reads))
	[ "$bad" -eq 0 ] || fail "$bad readers of files being rewritten failed"
	echo "ok: $((n + 6)) reads of a checkpoint and a record rewritten at every step, none failed"
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "PASS: $test_name"
