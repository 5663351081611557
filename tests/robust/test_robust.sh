#!/bin/sh
# Robustness: bad input, signals, crashes, non-finite numbers, failing ranks.
#   test_robust.sh TEST MODE_EXP COMPARE_RUNS CONFIG [SITE]
# TEST: data | checkpoints | signals | kill | nonfinite | ranks | folders | diskfull | output |
#       eval-signals | concurrent | shrink | fifo | pieces | numbers | names | nonsense |
#       fault SITE
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") compare=$(abspath "$3") config=$(abspath "$4")
enter_workdir


case $test_name in
data)
	printf '' >empty.txt
	head -c 20 /dev/urandom >short.txt
	head -c 1001 /dev/urandom >odd.bin
	# tokens are checked as they are read (core/data/data.h): big.bin is 65535
	# throughout, so the first window read fails; train-bad.bin is bad only in
	# its training part (360 tokens of 65535, then 40 of 1 held out), so the
	# first training sample does
	i=0
	while [ $i -lt 400 ]; do printf '\377\377'; i=$((i + 1)); done >big.bin
	i=0
	while [ $i -lt 360 ]; do printf '\377\377'; i=$((i + 1)); done >train-bad.bin
	while [ $i -lt 400 ]; do printf '\001\000'; i=$((i + 1)); done >>train-bad.bin
	expect 1 "missing.txt" "$exe" "$config" data.source=missing.txt run.out=o1 --quiet
	nothing_left o1
	expect 1 "empty.txt" "$exe" "$config" data.source=empty.txt run.out=o2 --quiet
	expect 1 "short.txt: .*tokens" "$exe" "$config" data.source=short.txt run.out=o3 --quiet
	expect 1 "odd.bin: 1001 bytes" "$exe" "$config" data.source=odd.bin data.vocab=300 run.out=o4 --quiet
	expect 1 "big.bin: token [0-9]* (byte offset [0-9]*) is 65535, not below vocab 300" \
		"$exe" "$config" data.source=big.bin data.vocab=300 run.out=o5 --quiet
	expect 1 "step 1: train-bad.bin: token [0-9]* (byte offset [0-9]*) is 65535" \
		"$exe" "$config" data.source=train-bad.bin data.vocab=300 run.out=o6 --quiet
	# on two ranks: every rank stops, one message, no hang
	expect 1 "train-bad.bin: token [0-9]* (byte offset [0-9]*) is 65535" timeout 60 \
		mpirun -n 2 "$exe" "$config" data.source=train-bad.bin data.vocab=300 run.out=o7 --quiet
	[ "$(grep -c 'mode-exp:' out.txt)" -eq 1 ] || fail "not one message: $(cat out.txt)"
	expect 2 "expected brown, synthetic" "$exe" "$config" data.source=corpus.csv --quiet
	# .u32: uint32 tokens, so ids past 65535 reach the model (tokens 69999 and 1)
	i=0
	while [ $i -lt 500 ]; do printf '\157\021\001\000\001\000\000\000'; i=$((i + 1)); done >wide.u32
	"$exe" "$config" data.source=wide.u32 data.vocab=70000 run.out=w run.steps=2 --quiet ||
		fail "training on wide.u32"
	"$exe" eval w/tiny/ckpt.h5 --windows 2 --json | grep -q '"windows": 2' || fail "eval of wide.u32"
	expect 1 "wide.u32: token [0-9]* (byte offset [0-9]*) is 69999, not below vocab 300" \
		"$exe" "$config" data.source=wide.u32 data.vocab=300 run.out=o8 --quiet
	head -c 1002 /dev/urandom >odd.u32
	expect 1 "odd.u32: 1002 bytes is not a whole number of uint32 tokens" \
		"$exe" "$config" data.source=odd.u32 data.vocab=70000 run.out=o9 --quiet
	nothing_left o9
	# a headerless .bin is uint16 (only an llm.c header could say uint32):
	# refused where the file is opened, before any output
	head -c 20000 /dev/zero >wide.bin
	expect 1 "wide.bin: vocab 70000 does not fit uint16 tokens (at most 65536)" \
		"$exe" "$config" data.source=wide.bin data.vocab=70000 run.out=o10 --quiet
	nothing_left o10
	# data.val_source: the held-out windows are the whole of that file (and
	# eval reads them by default); the bad cases name it
	head -c 3000 /dev/urandom | base64 >train.txt
	head -c 300 /dev/urandom | base64 | head -c 300 >held.txt
	"$exe" "$config" data.source=train.txt data.val_source=held.txt run.out=v run.steps=2 --quiet ||
		fail "training with data.val_source"
	"$exe" eval v/tiny/ckpt.h5 --json | grep -q '"windows": 9,' || fail "eval of held.txt: 299/32 windows"
	expect 1 "missing-held.txt: cannot open" \
		"$exe" "$config" data.val_source=missing-held.txt run.out=o10 --quiet
	nothing_left o10
	expect 1 "empty.txt: file is empty" "$exe" "$config" data.val_source=empty.txt run.out=o11 --quiet
	expect 1 "short.txt: 20 tokens, fewer than one held-out window of seq_len+1 = 33" \
		"$exe" "$config" data.val_source=short.txt run.out=o12 --quiet
	nothing_left o12
	expect 1 "odd.u32: 1002 bytes is not a whole number of uint32 tokens" "$exe" "$config" \
		data.source=wide.u32 data.vocab=70000 data.val_source=odd.u32 run.out=o13 --quiet
	expect 2 "val_source.*to be of the same kind as" \
		"$exe" "$config" data.source=train.txt data.val_source=wide.u32 --quiet
	;;
checkpoints)
	"$exe" "$config" run.out=good --quiet || fail "training"
	ck=good/tiny/ckpt.h5
	head -c 3000 "$ck" >truncated.h5
	echo "not hdf5" >text.h5
	cp good/tiny/run.h5 runfile.h5 # an HDF5 file, but a run file, no tensors
	expect 1 "truncated.h5: truncated or extended" "$exe" eval truncated.h5
	expect 1 "text.h5: not an HDF5 file written by mode" "$exe" eval text.h5
	# one flipped byte in the middle: the checksum catches it before HDF5 reads it
	cp "$ck" flipped.h5
	printf '\377' | dd of=flipped.h5 bs=1 seek=20000 conv=notrunc 2>/dev/null
	expect 1 "flipped.h5: corrupted (CRC-32" "$exe" eval flipped.h5
	expect 1 "runfile.h5: not a mode checkpoint (missing attribute config, seed or step)" \
		"$exe" eval runfile.h5
	expect 1 "nothing.h5: cannot open" "$exe" sample nothing.h5 --prompt a --tokens 3
	# a checkpoint from a smaller model in place of this run's: refused on resume
	"$exe" "$config" run.out=small model.d_ff=48 --quiet || fail "training small"
	cp small/tiny/ckpt.h5 good/tiny/ckpt.h5
	expect 1 "does not match" "$exe" "$config" run.out=good --resume --quiet
	# a run file that is not one, on resume
	"$exe" "$config" run.out=r --quiet --max-steps 4 || fail "training r"
	cp text.h5 r/tiny/run.h5
	expect 1 "run.h5: not an HDF5 file written by mode" "$exe" "$config" run.out=r --resume --quiet
	;;
signals)
	# SIGTERM and SIGINT: a checkpoint, a clean exit 128+signal, and a resume
	# that gives exactly the losses of an uninterrupted run
	steps=600
	[ -n "$sanitized" ] && steps=200
	long="run.steps=$steps run.eval_every=$((steps / 3)) run.ckpt_every=50"
	# shellcheck disable=SC2086
	"$exe" "$config" run.out=full $long --quiet || fail "full run"
	for sig in TERM INT HUP; do
		# shellcheck disable=SC2086
		"$exe" "$config" run.out="s$sig" $long --quiet &
		pid=$!
		# the handlers are in once the run's header (run.h5) is written; a
		# signal before them would meet the shell's own disposition (a
		# background job ignores SIGINT).  Signal once the first checkpoint
		# (step 50) is there, so that neither a slow start (ASan, a loaded
		# machine) nor a fast machine decides: the run is between steps 50
		# and 600 (600 steps take the release build about 4 s)
		i=0
		while [ ! -e "s$sig/tiny/ckpt.h5" ] && [ $i -lt 1200 ]; do
			sleep 0.05
			i=$((i + 1))
		done
		kill -s "$sig" "$pid"
		wait "$pid"
		code=$?
		want=$(case $sig in TERM) echo 143 ;; INT) echo 130 ;; HUP) echo 129 ;; esac)
		[ "$code" -eq "$want" ] || fail "SIG$sig: exit $code, expected $want"
		h5dump -a step "s$sig/tiny/ckpt.h5" >/dev/null || fail "SIG$sig: no readable checkpoint"
		h5dump -a step "s$sig/tiny/ckpt.h5" | grep -q "(0): $steps\$" && fail "SIG$sig came too late"
		# shellcheck disable=SC2086
		"$exe" "$config" run.out="s$sig" $long --resume --quiet || fail "resume after SIG$sig"
		"$compare" full/tiny/run.h5 "s$sig/tiny/run.h5" 0 || fail "resume after SIG$sig differs"
		ls "s$sig/tiny" | grep -q tmp && fail "SIG$sig left a temporary"
	done
	# a closed pipe on stdout stops the log, not the training: the run ends
	# with its last checkpoint, and the lost log is an error at the end
	{ "$exe" "$config" run.out=pipe 2>pipe-err.txt; echo $? >pipe-code.txt; } | head -n 1 >/dev/null
	[ "$(cat pipe-code.txt)" -eq 1 ] || fail "closed pipe: exit $(cat pipe-code.txt) (141 is SIGPIPE)"
	grep -q "writing the standard output failed (Broken pipe); the training went on without its log and its files (run.h5, ckpt.h5) are whole" pipe-err.txt ||
		fail "closed pipe: $(cat pipe-err.txt)"
	h5dump -a step pipe/tiny/ckpt.h5 | grep -q "(0): 24" || fail "closed pipe: the run did not finish"
	;;
eval-signals)
	# a signal during an evaluation is honoured between its chunks, not at
	# its end: each evaluation takes all 3124 held-out windows (about 3 s
	# in a release build), and the signal comes 0.8 s after the checkpoint
	# of step 1, in the evaluation of step 2 (of 3, every step evaluated;
	# or the last of 2); the run stops with a checkpoint, and the resume
	# makes that evaluation and equals the uninterrupted run (the last
	# step's: the resume then gathers the run file)
	big="model.d_model=64 model.d_ff=128 run.eval_windows=0 run.final_eval_windows=0 run.ckpt_every=1"
	for case in every:run.eval_every=1:3 last:run.eval_every=2:2; do
		name=${case%%:*} rest=${case#*:} every=${rest%:*} steps=${rest#*:}
		# shellcheck disable=SC2086
		"$exe" "$config" run.out="e$name-full" $big $every run.steps=$steps --quiet ||
			fail "eval $name: the uninterrupted run"
		cut=no
		for try in 1 2 3; do
			rm -rf "e$name"
			# shellcheck disable=SC2086
			"$exe" "$config" run.out="e$name" $big $every run.steps=$steps --quiet >out.txt 2>&1 &
			pid=$!
			i=0
			# step 1's checkpoint, or a later one: under load the poll can
			# miss the short while step 1's is there (step 2 trains fast)
			# and waited for ever while the run ended
			while ! h5dump -a step "e$name/tiny/ckpt.h5" 2>/dev/null | grep -q "(0): [1-9]" &&
				[ $i -lt 2400 ]; do
				sleep 0.05
				i=$((i + 1))
			done
			sleep 0.8
			kill -s TERM "$pid"
			wait "$pid"
			code=$?
			[ "$code" -eq 143 ] || fail "eval $name: exit $code: $(cat out.txt)"
			if grep -q "during its evaluation, which the resume makes" out.txt; then
				cut=yes
				break
			fi
		done
		[ $cut = yes ] || fail "eval $name: the signal never landed in an evaluation: $(cat out.txt)"
		echo "ok: eval $name: $(cat out.txt)"
		ls "e$name/tiny" | grep -q tmp && fail "eval $name: a temporary was left"
		# shellcheck disable=SC2086
		"$exe" "$config" run.out="e$name" $big $every run.steps=$steps --resume --quiet ||
			fail "eval $name: resume"
		"$compare" "e$name-full/tiny/run.h5" "e$name/tiny/run.h5" 0 ||
			fail "eval $name: the resumed run differs from the uninterrupted one"
		[ -e "e$name/tiny/records" ] && fail "eval $name: the run file was not gathered"
	done
	;;
kill)
	# SIGKILL at any moment leaves the last checkpoint readable: a checkpoint
	# every 2 steps (each about 0.1 s, most of it writing), killed at three
	# moments, before step 45 even on a fast machine
	"$exe" "$config" run.out=full run.steps=100 --quiet || fail "full run"
	for delay in 0.7 1.3 2.1; do
		rm -rf k
		"$exe" "$config" run.out=k run.steps=100 run.ckpt_every=2 --quiet &
		pid=$!
		sleep "$delay"
		kill -9 "$pid"
		wait "$pid" 2>/dev/null
		[ -e k/tiny/ckpt.h5 ] || continue
		h5dump -a step k/tiny/ckpt.h5 >/dev/null || fail "checkpoint unreadable after SIGKILL at ${delay}s"
		h5dump -a config k/tiny/run.h5 >/dev/null || fail "run file unreadable after SIGKILL at ${delay}s"
		"$exe" "$config" run.out=k run.steps=100 run.ckpt_every=2 --resume --quiet || fail "resume after SIGKILL"
		"$compare" full/tiny/run.h5 k/tiny/run.h5 0 || fail "resume after SIGKILL at ${delay}s differs"
	done
	;;
nonfinite)
	# a NaN in a gradient at step 5: stop, name it, keep the last good
	# checkpoint (step 4), record the batch
	export MODE_FAULT=nan@5
	expect 1 "step 5: non-finite gradient .*first in the gradient of layers/" \
		"$exe" "$config" run.out=n run.ckpt_every=2 --quiet
	h5dump -a step n/tiny/ckpt.h5 | grep -q "(0): 4" || fail "the last good checkpoint is not step 4"
	# a stopped run keeps its records in pieces beside run.h5 (docs/hdf5.md)
	h5ls -r n/tiny/records/step_00000005.h5 | grep -q "/nonfinite/step_000005/tokens" ||
		fail "no recorded batch"
	# the skip policy goes on and counts
	"$exe" "$config" run.out=s run.nonfinite=skip --quiet || fail "skip policy stopped"
	h5dump -d metrics/skipped s/tiny/run.h5 | grep -q "1, 1, 1" || fail "no skip counted"
	unset MODE_FAULT
	# a loss that really explodes (learning rate 1e4, no clipping)
	expect 1 "non-finite" "$exe" "$config" run.out=x optim.lr=1e4 optim.clip=0 run.steps=200 --quiet
	;;
ranks)
	# an error on one rank stops every rank with one message naming it
	export MODE_FAULT=error@1:3
	timeout 60 mpirun -n 2 "$exe" "$config" run.out=e --quiet >out.txt 2>&1
	code=$?
	[ "$code" -ne 124 ] || fail "a failing rank hung the job"
	[ "$code" -ne 0 ] || fail "a failing rank went unnoticed"
	grep -q "rank 1: step 3: forward/backward failed" out.txt || fail "message: $(cat out.txt)"
	[ "$(grep -c 'mode-exp:' out.txt)" -eq 1 ] || fail "not one message: $(cat out.txt)"
	unset MODE_FAULT
	expect 2 "more ranks than sequences" mpirun -n 4 "$exe" "$config" data.batch=2 --quiet
	;;
fault)
	# One rank fails just before a collective (MODE_FAULT=SITE@RANK:STEP,
	# core/comm/comm.h) while the others go on into it, on moe, staged and
	# integrated models at 4 ranks, failing on rank 2 and on rank 0.  Every
	# rank must exit non-zero within 30 seconds with one message naming the
	# rank and the step, and the checkpoint of step 2 must load.  Inside a
	# step the failing rank ends the job (MPI_Abort); at the checkpoint's
	# agreement points every rank learns of it (docs/robustness.md).
	site=$5
	case $site in
	checkpoint-* | runfile) step=4 ;;
	*) step=3 ;;
	esac
	if [ "$site" = sweep-plan ]; then # the sweep's agreement on its plan
		printf '[sweep]\nbase = %s\nout = sw\n[grid]\nrun.steps = 2, 3\n' "$config" >sw.ini
		for r in 2 0; do
			MODE_FAULT=sweep-plan@$r timeout 30 mpirun -n 4 "$exe" sweep sw.ini --no-report \
				>out.txt 2>&1
			code=$?
			[ "$code" -ne 124 ] && [ "$code" -ne 0 ] || fail "sweep-plan on rank $r: exit $code"
			[ "$(grep -c 'mode-exp sweep:' out.txt)" -eq 1 ] ||
				fail "sweep-plan on rank $r: not one message: $(cat out.txt)"
			[ "$r" = 0 ] || grep -q "rank $r: planning the sweep failed" out.txt ||
				fail "sweep-plan on rank $r: $(cat out.txt)"
			[ -e sw ] && fail "sweep-plan on rank $r: a refused sweep wrote sw/"
			echo "ok: $site on rank $r: exit $code: $(cat out.txt)"
		done
		echo "ok: fault $site"
		exit 0
	fi
	for case in moe:2 staged:2 integrated:2 moe:0; do
		kind=${case%:*} r=${case#*:}
		# rank 0 alone lays the checkpoint out and writes the run file
		case $site in checkpoint-layout | runfile) [ "$r" != 0 ] && continue ;; esac
		rm -rf f
		# [mod] only where a layer reads it (staged): elsewhere it is refused
		dial=
		[ "$kind" = staged ] && dial=mod.capacity=0.5
		# the sharded optimizer's collectives (docs/sharding.md) with it on
		zero=
		case $site in grad-reduce-scatter | param-allgather) zero=optim.shard=true ;; esac
		MODE_FAULT=$site@$r:$step timeout 30 mpirun -n 4 "$exe" "$config" \
			"model.layers=dense, $kind" moe.experts=4 ${dial:+"$dial"} ${zero:+"$zero"} run.steps=6 \
			run.ckpt_every=2 run.eval_every=3 run.routing_every=3 run.out=f --quiet \
			>out.txt 2>&1
		code=$?
		[ "$code" -ne 124 ] || fail "$site on rank $r ($kind): the job hung"
		[ "$code" -ne 0 ] || fail "$site on rank $r ($kind): a failure went unnoticed"
		[ "$(grep -c 'mode-exp:' out.txt)" -eq 1 ] ||
			fail "$site on rank $r ($kind): not one message: $(cat out.txt)"
		grep 'mode-exp:' out.txt | grep -q "step $step" ||
			fail "$site on rank $r ($kind): no step $step in $(grep 'mode-exp:' out.txt)"
		if [ "$r" != 0 ]; then
			grep 'mode-exp:' out.txt | grep -q "rank $r" ||
				fail "$site on rank $r ($kind): the rank is not named: $(cat out.txt)"
		fi
		h5dump -a step f/tiny/ckpt.h5 | grep -q "(0): 2" ||
			fail "$site on rank $r ($kind): the checkpoint is not step 2's"
		"$exe" eval f/tiny/ckpt.h5 --windows 2 >/dev/null 2>&1 ||
			fail "$site on rank $r ($kind): the checkpoint does not load"
		echo "ok: $site on rank $r ($kind): exit $code: $(grep 'mode-exp:' out.txt)"
	done
	;;
concurrent)
	# A run folder belongs to one process at a time: two --overwrite runs
	# into one folder at once, seeds 1 and 2: the second is refused at once,
	# naming the first, and the folder holds the first run alone, exactly
	# (the same bits as seed 1 trained by itself).  Then two sweeps on one
	# out folder, and a stale lock (its holder gone) that must not block.
	# long enough that the second process reaches the lock while the first
	# trains: 150 steps took 0.84 s on a quiet machine, less than a second
	# process's start there (the sanitized build is slower by itself)
	long="run.steps=600 run.ckpt_every=200 run.eval_every=200"
	[ -n "$sanitized" ] && long="run.steps=150 run.ckpt_every=50 run.eval_every=50"
	# shellcheck disable=SC2086
	"$exe" "$config" run.out=solo run.seed=1 $long --quiet || fail "solo run"
	# shellcheck disable=SC2086
	"$exe" "$config" run.out=c run.seed=1 $long --overwrite --quiet &
	pid=$!
	i=0
	while [ ! -e c/tiny/.lock ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
	[ -e c/tiny/.lock ] || fail "no lock file while the first run trains"
	# shellcheck disable=SC2086
	expect 1 "c/tiny is in use by another process (pid $pid on host" \
		"$exe" "$config" run.out=c run.seed=2 $long --overwrite --quiet
	wait "$pid" || fail "the first run failed"
	"$compare" solo/tiny/run.h5 c/tiny/run.h5 0 || fail "the folder does not hold the first run alone"
	h5dump -a config c/tiny/run.h5 | grep -q "seed = 1" || fail "config of another seed"
	[ -e c/tiny/.lock ] && fail "the lock file outlived its run"
	# a stale lock: a file nobody holds (its process was killed) is taken over
	echo "pid 1 on host gone since never: training (a killed run)" >c/tiny/.lock
	"$exe" "$config" run.out=c run.seed=2 run.steps=4 --overwrite --quiet || fail "stale lock blocked"
	# two sweeps on one out folder: the second stops before any run, naming the first
	printf '[sweep]\nbase = %s\nout = sw\n[grid]\nrun.seed = 1, 2\n[all]\nrun.steps = 100\n' \
		"$config" >grid.ini
	"$exe" sweep grid.ini --no-report >sweep1.txt 2>&1 &
	pid=$!
	i=0
	while [ ! -e sw/.lock ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
	expect 1 "sw is in use by another process (pid $pid on host .*: sweep" "$exe" sweep grid.ini --no-report
	wait "$pid" || fail "the first sweep failed: $(cat sweep1.txt)"
	[ -e sw/.lock ] && fail "the sweep's lock outlived it"
	;;
shrink)
	# A corpus that changes under a run.  Truncated while training: the read
	# that meets its new end stops the run with a message naming the file
	# (it used to die of SIGBUS, exit 135), the last checkpoint whole.
	head -c 3000000 /dev/urandom | base64 -w 0 | head -c 2000000 >corpus.txt
	"$exe" "$config" data.source=corpus.txt run.steps=100000 run.ckpt_every=20 \
		run.eval_every=0 run.out=t --quiet >out.txt 2>&1 &
	pid=$!
	i=0
	while [ ! -e t/tiny/ckpt.h5 ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
	truncate -s 1000 corpus.txt
	wait "$pid"
	code=$?
	[ "$code" -eq 1 ] || fail "truncated corpus: exit $code (135 is SIGBUS): $(cat out.txt)"
	grep -q "corpus.txt: the file changed under the run: it ends at byte 1000" out.txt ||
		fail "truncated corpus: $(cat out.txt)"
	"$exe" eval t/tiny/ckpt.h5 --data synthetic --windows 2 >/dev/null || fail "checkpoint after the truncation"
	echo "ok: truncated under the run: $(cat out.txt)"
	# replaced between --max-steps and --resume (same size, other bytes): refused, naming the file
	head -c 300000 /dev/urandom | base64 -w 0 | head -c 200000 >c2.txt
	"$exe" "$config" data.source=c2.txt run.out=r --max-steps 8 --quiet || fail "first part"
	head -c 300000 /dev/urandom | base64 -w 0 | head -c 200000 >c2.txt
	expect 1 "ckpt.h5: the run read other data: when checkpointed, c2.txt: bytes 200000 fnv1a64" \
		"$exe" "$config" data.source=c2.txt run.out=r --resume --quiet
	h5dump -a provenance/data r/tiny/run.h5 | grep -q "c2.txt: bytes 200000 fnv1a64" ||
		fail "no fingerprint in the run file"
	;;
fifo)
	# A path that is a FIFO is refused at once, never waited on (open() of
	# a FIFO blocks until a writer comes): as the corpus, as the held-out
	# file, as eval --data, as a config, under mpirun.  timeout turns a
	# hang into exit 124.
	mkfifo f.txt f.ini f.h5
	expect 1 "f.txt: not a regular file (a FIFO)" timeout 30 "$exe" "$config" data.source=f.txt run.out=o --quiet
	nothing_left o
	expect 1 "f.txt: not a regular file (a FIFO)" timeout 30 "$exe" "$config" data.val_source=f.txt run.out=o --quiet
	expect 1 "f.txt: not a regular file (a FIFO)" timeout 60 mpirun -n 2 "$exe" "$config" data.source=f.txt run.out=o --quiet
	"$exe" "$config" run.out=g run.steps=2 --quiet || fail "training"
	expect 1 "f.txt: not a regular file (a FIFO)" timeout 30 "$exe" eval g/tiny/ckpt.h5 --data f.txt
	expect 1 "f.h5: not a regular file (a FIFO)" timeout 30 "$exe" eval f.h5
	expect 1 "f.h5: not a regular file (a FIFO)" timeout 30 "$exe" "$config" run.out=o --init-from f.h5 --quiet
	expect 2 "f.ini: not a regular file (a FIFO)" timeout 30 "$exe" f.ini
	mkdir d.txt
	expect 1 "d.txt: not a regular file (a directory)" timeout 30 "$exe" "$config" data.source=d.txt run.out=o --quiet
	;;
pieces)
	# A run in pieces with one missing: the resume (and so the gathering)
	# stops naming the steps that are gone; the first piece of records too,
	# and the last one before the checkpoint.
	"$exe" "$config" run.out=p run.steps=48 --max-steps 40 --quiet || fail "first part"
	ls p/tiny/records/step_00000016.h5 >/dev/null || fail "no piece of step 16"
	cp -r p keep
	rm p/tiny/records/step_00000016.h5
	expect 1 "step_00000024.h5: the records of steps 9..16 are missing" \
		"$exe" "$config" run.out=p run.steps=48 --resume --quiet
	rm -rf p && cp -r keep p
	rm p/tiny/records/step_00000040.h5
	expect 1 "run.h5: its records end at step 32, but the checkpoint is at step 40: the records of steps 33..40" \
		"$exe" "$config" run.out=p run.steps=48 --resume --quiet
	# a damaged piece: named, with the steps it held
	rm -rf p && cp -r keep p
	printf '\377' | dd of=p/tiny/records/step_00000016.h5 bs=1 seek=3000 conv=notrunc 2>/dev/null
	expect 1 "step_00000016.h5: corrupted (CRC-32 .*: it held the records of steps 9..16" \
		"$exe" "$config" run.out=p run.steps=48 --resume --quiet
	# whole again: the resume goes on and gathers
	rm -rf p && cp -r keep p
	"$exe" "$config" run.out=p run.steps=48 --resume --quiet || fail "resume of whole pieces"
	;;
numbers)
	# numbers that would overflow what they size: refused with the key
	expect 2 "run.flops_budget 1e+300 buys more than the 1000000000000 steps" \
		"$exe" flops "$config" run.flops_budget=1e300
	expect 1 "run.flops_budget 1e+300 buys more than the 1000000000000 steps" \
		"$exe" "$config" run.flops_budget=1e300 run.out=o --quiet
	nothing_left o
	expect 2 "run.steps=99999999999999: expected an integer in \[0, 1e+12\]" \
		"$exe" "$config" run.steps=99999999999999 --quiet
	expect 2 "to be at most 2^30 token positions a step" \
		"$exe" "$config" data.batch=65536 data.seq_len=65536 --quiet
	expect 2 "--threads 100000000000: expected a positive integer up to 4096" \
		"$exe" "$config" --threads 100000000000 --quiet
	expect 2 "--steps 99999999999: expected a positive integer up to 1000000" \
		"$exe" bench "$config" --steps 99999999999
	printf '[sweep]\nbase = %s\nout = sw\n[grid]\nrun.flops_budget = 1e300\n' "$config" >big.ini
	expect 2 "buys more than 10^12 steps" "$exe" sweep big.ini --dry-run
	# widths that size tensors, bounded where experts x d_model x d_ff would wrap
	expect 2 "model.d_model=1048577: expected an integer in \[1, 1048576\]" \
		"$exe" flops "$config" model.d_model=1048577
	expect 2 "moe.d_ff=3000000000: expected an integer in \[0, 1048576\]" \
		"$exe" flops "$config" "model.layers=dense, moe" moe.d_ff=3000000000
	# derived sizes in a width that cannot wrap: an expert-choice capacity
	# max(1, floor(c S / E)) is at most S, so c = 1e9 is c = E = 8 (it wrapped
	# past 2^31 to 1: another model, fewer FLOPs); in flops and in training
	"$exe" flops "$config" "model.layers=ec x 2" ec.capacity_factor=8 >f8.txt || fail "flops ec 8"
	"$exe" flops "$config" "model.layers=ec x 2" ec.capacity_factor=1e9 >f9.txt || fail "flops ec 1e9"
	diff f8.txt f9.txt >/dev/null || fail "ec.capacity_factor 1e9 is not 8: $(diff f8.txt f9.txt)"
	for c in 8 1e9; do
		"$exe" "$config" "model.layers=ec x 2" ec.capacity_factor=$c run.steps=4 run.out=ec$c \
			--quiet || fail "training ec.capacity_factor=$c"
	done
	"$compare" ec8/tiny/run.h5 ec1e9/tiny/run.h5 0 >cmp.txt ||
		fail "ec.capacity_factor 1e9 trained another model than 8: $(cat cmp.txt)"
	# token choice: a capacity past 2^31 is no dropping, as 0 is
	"$exe" flops "$config" "model.layers=dense, moe" moe.capacity_factor=0 >m0.txt || fail "flops moe 0"
	"$exe" flops "$config" "model.layers=dense, moe" moe.capacity_factor=1e9 >m9.txt || fail "flops moe 1e9"
	diff m0.txt m9.txt >/dev/null || fail "moe.capacity_factor 1e9 is not 0: $(diff m0.txt m9.txt)"
	for c in 0 1e9; do
		"$exe" "$config" "model.layers=dense, moe" moe.capacity_factor=$c run.steps=4 \
			run.out=moe$c --quiet || fail "training moe.capacity_factor=$c"
	done
	"$compare" moe0/tiny/run.h5 moe1e9/tiny/run.h5 0 >cmp.txt ||
		fail "moe.capacity_factor 1e9 (wrapped: every assignment dropped) is not 0: $(cat cmp.txt)"
	# the environment's numbers have the command line's bounds: refused
	# naming the variable (training, eval, sweep), 2 threads taken as given
	expect 2 "OPENBLAS_NUM_THREADS=99999999999: expected an integer in \[0, 4096\]" \
		env OPENBLAS_NUM_THREADS=99999999999 "$exe" "$config" run.out=t --quiet
	nothing_left t
	expect 2 "OPENBLAS_NUM_THREADS=4x: expected an integer" \
		env OPENBLAS_NUM_THREADS=4x "$exe" eval ec8/tiny/ckpt.h5 --windows 2
	printf '[sweep]\nbase = %s\nout = sw\n[grid]\noptim.lr = 1e-3, 2e-3\n' "$config" >lr.ini
	expect 2 "OPENBLAS_NUM_THREADS=-1: expected an integer" \
		env OPENBLAS_NUM_THREADS=-1 "$exe" sweep lr.ini --dry-run
	expect 0 "1 rank(s) x 2 thread(s)" env OPENBLAS_NUM_THREADS=2 "$exe" "$config" run.steps=1 run.out=t2
	# command-line numbers through the same parser: 512x is not 512
	printf 'some text\n' >t.txt
	expect 2 "expected TEXT OUT (or brown), --vocab from 260" "$exe" tokenize t.txt T --vocab 512x
	# one grid axis's values that are one number (or runs that resolve to
	# one config): refused naming both spellings, not two replicates
	printf '[sweep]\nbase = %s\nout = sw\n[grid]\noptim.lr = 1e-3, 0.001\n' "$config" >dup.ini
	expect 2 "runs lr-1e-3 and lr-0.001 resolve to the same config.*optim.lr=1e-3 (line 5) and optim.lr=0.001 (line 5)" \
		"$exe" sweep dup.ini --dry-run
	printf '[sweep]\nbase = %s\nout = sw\nseeds = 1, 01\n[grid]\noptim.lr = 1e-3, 2e-3\n' "$config" >dups.ini
	expect 2 "run.seed=1 (line 4) and run.seed=01 (line 4)" "$exe" sweep dups.ini --dry-run
	[ -e sw ] && fail "a refused sweep wrote sw"
	# numbers read from files: a routing record's expert ids and picks
	# checked against the kind's range where they are replayed (99, -7, 1e10
	# were drops, 7 a pick), the record, its dataset and the value named
	"$exe" "$config" "model.layers=dense, moe" run.steps=2 run.out=m --quiet || fail "training moe"
	"$exe" eval m/tiny/ckpt.h5 --windows 4 --mode topk --record rec.h5 >/dev/null || fail "record"
	"$exe" eval m/tiny/ckpt.h5 --windows 4 --mode topk --routing replay:rec.h5 >/dev/null ||
		fail "the record as written does not replay"
	for v in 99 -7 1e+10 0.5; do
		cp rec.h5 bad.h5
		"$compare" --set bad.h5 routing/step_000002/layer_1/experts $v || fail "--set $v"
		expect 1 "bad.h5: routing/step_000002/layer_1/experts holds $v (window [0-9]*): expected an integer in \[-1, 7\]" \
			"$exe" eval m/tiny/ckpt.h5 --windows 4 --mode topk --routing replay:bad.h5
	done
	# expert choice: the picks read back (the gate ignored the book: any
	# record replayed as the learned routing), slot e holding e or -1
	"$exe" eval ec8/tiny/ckpt.h5 --windows 4 --mode topk --record ecrec.h5 >/dev/null ||
		fail "record ec"
	cp ecrec.h5 ecnone.h5
	"$compare" --set ecnone.h5 routing/step_000004/layer_0/experts -1 || fail "--set ec -1"
	"$exe" eval ec8/tiny/ckpt.h5 --windows 4 --mode topk --routing replay:ecnone.h5 >ec.txt ||
		fail "ec replay: $(cat ec.txt)"
	grep -q "^replay .* 0/4 " ec.txt || fail "ec: a record of no picks replayed as the learned routing: $(cat ec.txt)"
	"$compare" --set ecrec.h5 routing/step_000004/layer_0/experts 99 || fail "--set ec 99"
	expect 1 "ecrec.h5: routing/step_000004/layer_0/experts holds 99 (window 0): expected -1 or 0 (slot 0 is expert 0's)" \
		"$exe" eval ec8/tiny/ckpt.h5 --windows 4 --mode topk --routing replay:ecrec.h5
	"$exe" "$config" "model.layers=dense, mod" run.steps=2 run.out=d --quiet || fail "training mod"
	"$exe" eval d/tiny/ckpt.h5 --windows 4 --record drec.h5 >/dev/null || fail "record mod"
	"$compare" --set drec.h5 routing/step_000002/layer_1/causal 7 || fail "--set causal"
	expect 1 "drec.h5: routing/step_000002/layer_1/causal holds 7 (window [0-9]*): expected an integer in \[0, 1\]" \
		"$exe" eval d/tiny/ckpt.h5 --windows 4 --routing replay:drec.h5
	# an eval CSV cell that is not a number: refused, not read as 0
	an=$(dirname "$exe")/../analysis/mode-analyze
	[ -x "$an" ] || fail "no mode-analyze at $an"
	# records the analysis reads as indices: a mor depth of -7 indexed its
	# histogram out of bounds (depth, heatmap)
	"$exe" "$config" "model.layers=dense, mor" run.steps=2 run.out=r --quiet || fail "training mor"
	cp r/tiny/run.h5 deep.h5
	"$compare" --set deep.h5 routing/step_000002/layer_1/depth -7 || fail "--set depth"
	for cmd in depth heatmap; do
		expect 1 "deep.h5: /routing/step_000002/layer_1/depth holds -7 at element 0: expected an integer in \[0, 3\]" \
			"$an" $cmd deep.h5 --out f
	done
	h=checkpoint,mode,policy,class,tokens,windows,loss,se,diff,diff_se,p,identical_windows,flops_per_token
	printf '%s\n%s\n' "$h" "o/x/ckpt.h5,topk,random,all,10,2,1.5,0.1,abc,0.01,0.001,0,5" >cf.csv
	expect 1 "cf.csv:2: diff = 'abc': expected a finite number" "$an" counterfactual cf.csv --out f
	;;
names)
	# run.name stays inside run.out (the sweep's rule for its run names)
	mkdir inside
	for n in .. . ../x a/b .hidden; do
		expect 2 "run.name=$n: expected a folder name inside run.out" \
			"$exe" "$config" run.out=inside "run.name=$n" run.steps=2 --quiet
	done
	[ -z "$(ls -A inside)" ] || fail "a refused name wrote: $(ls -A inside)"
	[ -e tiny ] && fail "a refused name wrote beside run.out"
	"$exe" "$config" run.out=inside "run.name=a b-c_1" run.steps=2 --quiet || fail "a plain name"
	;;
nonsense)
	# training that ends in nonsense is no success: most steps skipped, or
	# a last evaluation that is not finite; the records stay
	expect 1 "the run skipped [0-9]* of its 20 steps for non-finite" \
		"$exe" "$config" optim.lr=1e10 run.nonfinite=skip run.steps=20 run.out=n --quiet
	h5dump -a config n/tiny/run.h5 >/dev/null || fail "the records of a nonsense run are gone"
	# one skip in 24 is a run that went on: success
	MODE_FAULT=nan@5 "$exe" "$config" run.nonfinite=skip run.out=s --quiet || fail "one skip"
	;;
folders)
	# a run folder is never replaced by accident
	"$exe" "$config" run.out=a --quiet || fail "training a"
	cksum a/tiny/run.h5 a/tiny/ckpt.h5 >before.txt
	expect 1 "a/tiny holds a run (run.h5, ckpt.h5): --resume continues it, --overwrite" \
		"$exe" "$config" run.out=a 'model.layers=dense x 3' --quiet
	cksum a/tiny/run.h5 a/tiny/ckpt.h5 >after.txt
	cmp -s before.txt after.txt || fail "a refused run touched the earlier one"
	expect 1 "no checkpoint to resume" "$exe" "$config" run.out=none --resume --quiet
	nothing_left none
	expect 2 "goes with neither --overwrite nor --init-from" \
		"$exe" "$config" run.out=a --resume --overwrite --quiet
	# a refused resume names what differs
	expect 1 "differing keys, checkpoint -> now: model.d_ff (64 -> 48)" \
		"$exe" "$config" run.out=a model.d_ff=48 --resume --quiet
	# --overwrite starts anew: another seed, other losses, no piece of the old run
	"$exe" "$config" run.out=a run.seed=9 --overwrite --quiet || fail "--overwrite"
	"$compare" a/tiny/run.h5 a/tiny/run.h5 0 >/dev/null || fail "overwritten run unreadable"
	h5dump -a config a/tiny/run.h5 | grep -q "seed = 9" || fail "--overwrite kept the old run"
	# --init-from: a new run from a checkpoint's parameters, its own config
	"$exe" "$config" run.out=fresh run.steps=1 --quiet || fail "fresh"
	"$exe" "$config" run.out=b run.steps=1 optim.lr=1e-4 --init-from a/tiny/ckpt.h5 --quiet ||
		fail "--init-from"
	f=$("$compare" --values fresh/tiny/run.h5 metrics/loss) b=$("$compare" --values b/tiny/run.h5 metrics/loss)
	awk -v f="$f" -v b="$b" 'BEGIN { exit !(b < f - 0.3) }' ||
		fail "--init-from: first loss $b, not below a fresh start's $f"
	h5dump -a provenance/init_from b/tiny/run.h5 | grep -q "a/tiny/ckpt.h5" ||
		fail "no provenance/init_from"
	expect 1 "init-from: a/tiny/ckpt.h5: dataset 'layers/0/w1' has extent 64 in dimension 1, expected 48" \
		"$exe" "$config" run.out=c model.d_ff=48 --init-from a/tiny/ckpt.h5 --quiet
	# eval and sample refuse what does not fit the vocabulary; token ids in and out
	i=0
	while [ $i -lt 3000 ]; do printf '\001\001\054\000'; i=$((i + 1)); done >v300.bin # 257, 44
	"$exe" "$config" data.source=v300.bin data.vocab=300 run.out=v --quiet || fail "vocab 300"
	echo "some text" >t.txt
	expect 1 "t.txt: text is read as bytes .* this checkpoint's vocabulary is 300" \
		"$exe" eval v/tiny/ckpt.h5 --data t.txt
	expect 1 "vocab 300: a text prompt is bytes.*--prompt-ids" \
		"$exe" sample v/tiny/ckpt.h5 --prompt ab --tokens 3
	expect 1 "token 1 is 300, not below the model's vocabulary of 300" \
		"$exe" sample v/tiny/ckpt.h5 --prompt-ids 257,300 --tokens 3
	out=$("$exe" sample v/tiny/ckpt.h5 --prompt-ids 257,44 --tokens 3) || fail "sample ids"
	echo "$out" | head -n 1 | grep -Eq '^257 44( [0-9]+){3}$' || fail "sample ids: $out"
	;;
diskfull)
	# A full disk at a checkpoint, on a real file system: a tmpfs of 5 MiB
	# holds the first checkpoint (3.4 MiB) but not a second beside it.  One
	# message naming the file and the room, exit 1 without a crash (HDF5
	# never writes to a full disk: core/io/h5util.h), the first checkpoint
	# and the run file whole; at 1 rank and at 4 (the checkpoint written by
	# all ranks).  Mounting needs root: skipped with the reason otherwise.
	if [ "$(id -u)" -ne 0 ] || ! mkdir small || ! mount -t tmpfs -o size=5m tmpfs small 2>/dev/null; then
		echo "skipped: mounting a 5 MiB tmpfs needs root (docs/robustness.md)"
		exit 77
	fi
	trap 'umount "$work/small" 2>/dev/null; rm -rf "$work"' EXIT
	for n in 1 4; do
		rm -rf small/f
		timeout 60 mpirun -n "$n" "$exe" "$config" 'model.layers=dense, moe' moe.experts=4 \
			model.d_model=64 model.d_ff=256 run.ckpt_every=8 run.out=small/f --quiet \
			>out.txt 2>&1
		code=$?
		[ "$code" -eq 1 ] || fail "-n $n: exit $code, expected 1: $(cat out.txt)"
		[ "$(grep -c 'mode-exp:' out.txt)" -eq 1 ] || fail "-n $n: not one message: $(cat out.txt)"
		grep -q "step 16: .*ckpt.h5: no room to write it: it needs about" out.txt ||
			fail "-n $n: message: $(cat out.txt)"
		grep -qi "segmentation\|signal" out.txt && fail "-n $n: crashed: $(cat out.txt)"
		h5dump -a step small/f/tiny/ckpt.h5 | grep -q "(0): 8" ||
			fail "-n $n: the checkpoint of step 8 is not whole"
		"$exe" eval small/f/tiny/ckpt.h5 --windows 2 >/dev/null 2>&1 ||
			fail "-n $n: the checkpoint of step 8 does not load"
		# the run file reads, with the steps up to the checkpoint's at least (the
		# piece of step 16 went in before the checkpoint: resume drops it)
		"$compare" --values small/f/tiny/run.h5 metrics/step | grep -qx 8 ||
			fail "-n $n: the run file lost the steps of the checkpoint"
		ls small/f/tiny | grep -q tmp && fail "-n $n: a temporary file was left"
		echo "ok: -n $n: exit $code: $(cat out.txt)"
	done
	;;
output)
	# output that is lost is an error, not a silent exit 0
	"$exe" "$config" run.out=g run.steps=4 --quiet || fail "training"
	expect 1 "mode-exp eval: writing the standard output failed (No space left on device)" \
		sh -c "\"$exe\" eval g/tiny/ckpt.h5 --windows 2 --json >/dev/full"
	expect 1 "mode-exp sample: writing the standard output failed (No space left on device)" \
		sh -c "\"$exe\" sample g/tiny/ckpt.h5 --prompt ab --tokens 4 >/dev/full"
	expect 1 "mode-exp flops: writing the standard output failed" \
		sh -c "\"$exe\" flops \"$config\" >/dev/full"
	expect 1 "writing the standard output failed (No space left on device); the training went on" \
		sh -c "\"$exe\" \"$config\" run.out=full >/dev/full"
	# JSON is JSON on every path: one window has no standard error
	"$exe" eval g/tiny/ckpt.h5 --windows 1 --json >one.json || fail "eval of one window"
	grep -q '"se": null' one.json || fail "one window: $(cat one.json)"
	grep -qi nan one.json && fail "NaN in JSON: $(cat one.json)"
	echo file >afile
	expect 1 "afile/sub/tiny: cannot create the output folder" "$exe" "$config" run.out=afile/sub --quiet
	mkdir ro
	if [ "$(id -u)" -ne 0 ]; then
		chmod 555 ro
		expect 1 "not writable" "$exe" "$config" run.out=ro --quiet
	fi
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "ok: $test_name"
