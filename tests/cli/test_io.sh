#!/bin/sh
# What comes in from and goes out to the field's tools, end to end.
#   test_io.sh TEST MODE_EXP COMPARE_RUNS CONFIG
# TEST: tokens (llm.c's token files) | tensorboard (the event files)
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") compare=$(abspath "$3") config=$(abspath "$4")
src=$(cd "$(dirname "$0")/../.." && pwd) # the repository
reader="$src/tests/cli/tfevents_read.py"
enter_workdir
command -v python3 >/dev/null || fail "python3 is needed (the llm.c files, the event reader)"

run() { # dir ranks args...: train the tiny config into dir
	dir=$1 n=$2
	shift 2
	mpirun -n "$n" "$exe" "$config" run.out="$dir" --quiet "$@" || fail "mode-exp -n $n $*"
}

# tokens OUT KIND N V: N tokens below V (a fixed stream) as KIND: llm1 (llm.c
# version 1, uint16), llm7 (version 7, uint32), bin (headerless uint16),
# u32 (headerless uint32); llm1-short: llm1 less its last token.
tokens() {
	python3 - "$@" <<'EOF'
import struct, sys
out, kind, n, v = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tok = [(i * 40503 + (i * i) % 977) % v for i in range(n)]
wide = kind in ("llm7", "u32")
body = struct.pack("<%d%s" % (n, "I" if wide else "H"), *tok)
if kind.startswith("llm"):
    h = [20240801 if wide else 20240520, 7 if wide else 1, n] + [0] * 253
    body = struct.pack("<256i", *h) + body
if kind.endswith("-short"):
    body = body[:-2]
open(out, "wb").write(body)
EOF
}

case $test_name in
tokens)
	# llm.c's files train, to the bits of the same tokens without the
	# header (.bin uint16, .u32 uint32): the header is skipped, the sampling
	# is the same; the run records the whole file's fingerprint.
	tokens v1.bin llm1 20000 512
	tokens plain.bin bin 20000 512
	tokens v7.bin llm7 20000 512
	tokens plain.u32 u32 20000 512
	for f in v1.bin plain.bin v7.bin plain.u32; do
		run "r-$f" 1 data.source="$f" data.vocab=512 run.steps=8 run.eval_every=8
	done
	"$compare" r-plain.bin/tiny/run.h5 r-v1.bin/tiny/run.h5 0 || fail "llm.c v1 differs from .bin"
	"$compare" r-plain.u32/tiny/run.h5 r-v7.bin/tiny/run.h5 0 || fail "llm.c v7 differs from .u32"
	h5dump -a provenance/data r-v1.bin/tiny/run.h5 | grep -q "v1.bin: bytes 41024 fnv1a64" ||
		fail "the fingerprint is not the whole llm.c file's: $(h5dump -a provenance/data r-v1.bin/tiny/run.h5)"
	# version 7 holds a vocab past 65536 (uint32 tokens); version 1 does not
	tokens big7.bin llm7 20000 70000
	run r-big7 1 data.source=big7.bin data.vocab=70000 run.steps=2 run.eval_every=2
	expect 1 "v1.bin: vocab 70000 does not fit uint16 tokens" \
		mpirun -n 1 "$exe" "$config" run.out=x data.source=v1.bin data.vocab=70000 --quiet
	# a truncated file: refused naming it and both sizes, at 1 and 2 ranks
	tokens short.bin llm1-short 20000 512
	for n in 1 2; do
		expect 1 "short.bin: 41022 bytes, but its llm.c header (magic 20240520, version 1) says 20000 uint16 tokens, 1024 + 20000 x 2 = 41024 bytes: the file is truncated" \
			mpirun -n $n "$exe" "$config" run.out=x data.source=short.bin data.vocab=512 --quiet
	done
	nothing_left x/tiny
	# a bad magic: a header right but for it; a version not the magic's
	python3 -c "
import sys; b = bytearray(open('v1.bin', 'rb').read()); b[0] ^= 1; open('magic.bin', 'wb').write(b)
b = bytearray(open('v7.bin', 'rb').read()); b[4] = 1; open('ver.bin', 'wb').write(b)"
	expect 1 "magic.bin: its header reads as an llm.c token file's (version 1, 20000 uint16 tokens, which fill its 41024 bytes exactly) but its magic is 20240521, neither 20240520 (version 1) nor 20240801 (version 7)" \
		mpirun -n 1 "$exe" "$config" run.out=x data.source=magic.bin data.vocab=512 --quiet
	expect 1 "ver.bin: llm.c token file of magic 20240801 and version 1: that magic goes with version 7" \
		mpirun -n 1 "$exe" "$config" run.out=x data.source=ver.bin data.vocab=512 --quiet
	# a negative count: said as such (it read as "longer than its header says")
	python3 -c "
import struct; b = bytearray(open('v1.bin', 'rb').read()); b[8:12] = struct.pack('<i', -5)
open('neg.bin', 'wb').write(b)"
	expect 1 "neg.bin: its llm.c header (magic 20240520, version 1) says -5 tokens: expected a count of 0 or more" \
		mpirun -n 1 "$exe" "$config" run.out=x data.source=neg.bin data.vocab=512 --quiet
	# a token >= vocab: the step that samples it stops, naming the file, the
	# token's index and byte offset (past the header), its value and vocab
	expect 1 "v7.bin: token [0-9]* (byte offset [0-9]*) is [0-9]*, not below vocab 300" \
		mpirun -n 2 "$exe" "$config" run.out=x data.source=v7.bin data.vocab=300 --quiet
	# held out in an llm.c file too; and eval --data reads one
	tokens held.bin llm1 3000 512
	run h 1 data.source=v7.bin data.val_source=held.bin data.vocab=512 run.steps=4 run.eval_every=4
	out=$("$exe" eval h/tiny/ckpt.h5 --data held.bin --windows 4 2>&1) || fail "eval of an llm.c file: $out"
	# a resume on changed data is refused (the fingerprint covers the tokens)
	run c 1 data.source=v1.bin data.vocab=512 run.steps=16 --max-steps 8
	python3 -c "
b = bytearray(open('v1.bin', 'rb').read()); b[5000] ^= 1; open('v1.bin', 'wb').write(b)"
	expect 1 "the run read other data" \
		mpirun -n 1 "$exe" "$config" run.out=c data.source=v1.bin data.vocab=512 run.steps=16 --resume --quiet
	;;
tensorboard)
	# Every run writes events.out.tfevents.* beside run.h5; an independent
	# reader checks every record's CRC and every scalar against the run file
	# (tags are its datasets: metrics/*, eval/*, layer_stats/<l>/*).
	mixed='model.layers=dense, mod, moe'
	need='metrics/loss metrics/lr metrics/grad_norm metrics/tokens_per_s eval/loss_topk
		eval/loss_causal layer_stats/1/topk_capacity layer_stats/1/causal_capacity
		layer_stats/2/maxvio layer_stats/2/dropped'
	for n in 1 2; do
		run "t$n" "$n" "$mixed"
		[ "$(ls "t$n"/tiny/events.out.tfevents.* | wc -l)" -eq 1 ] || fail "-n $n: not one event file"
		python3 "$reader" "t$n/tiny" --require $need || fail "-n $n: the events"
	done
	# 24 steps: 25 records (file_version first), 24 of each metric, 2 evaluations
	python3 "$reader" --dump t1/tiny >d.txt || fail "dump"
	[ "$(grep -c ' metrics/loss ' d.txt)" -eq 24 ] || fail "not 24 losses: $(grep -c ' metrics/loss ' d.txt)"
	[ "$(grep -c ' eval/loss_topk ' d.txt)" -eq 2 ] || fail "not 2 evaluations"
	# a resume adds a file and repeats no step: stopped at step 10
	# (--max-steps, checkpoint at 10), and failed at step 11 after the
	# checkpoint of step 8 (the events of 9 and 10 are cut from the first
	# file, or the reader would find them twice)
	run m 1 "$mixed" --max-steps 10
	run m 1 "$mixed" --resume
	[ "$(ls m/tiny/events.out.tfevents.* | wc -l)" -eq 2 ] || fail "--resume: not two event files"
	python3 "$reader" m/tiny --require $need || fail "--max-steps then --resume"
	MODE_FAULT=error@0:11 mpirun -n 1 "$exe" "$config" run.out=k --quiet "$mixed" >/dev/null 2>&1 &&
		fail "MODE_FAULT=error@0:11 did not stop the run"
	python3 "$reader" --dump k/tiny | grep -q '^10 metrics/loss ' || fail "no event of step 10 before the fault"
	sleep 1 # another second: another file name (a clash takes a suffix anyway)
	run k 1 "$mixed" --resume
	python3 "$reader" k/tiny --require $need || fail "failed at 11, resumed from 8"
	"$compare" t1/tiny/run.h5 k/tiny/run.h5 0 || fail "the resumed run differs"
	# --no-tensorboard: no event file, the same run file bits; --overwrite
	# takes the old run's event files away
	run o 1 "$mixed" --no-tensorboard
	ls o/tiny/events.out.tfevents.* 2>/dev/null && fail "--no-tensorboard wrote an event file"
	"$compare" t1/tiny/run.h5 o/tiny/run.h5 0 || fail "--no-tensorboard changed the run"
	run t1 1 "$mixed" --overwrite --no-tensorboard
	ls t1/tiny/events.out.tfevents.* 2>/dev/null && fail "--overwrite left the old run's events"
	# an event that cannot be written stops every rank (MODE_FAULT: rank 0's
	# write fails at step 5), naming the file; --resume goes on from step 4
	MODE_FAULT=tfevents@0:5 timeout 60 mpirun -n 2 "$exe" "$config" run.out=u --quiet "$mixed" \
		run.ckpt_every=4 >out.txt 2>&1
	code=$?
	[ "$code" -eq 1 ] || fail "a failed event write: exit $code: $(cat out.txt)"
	grep -q "step 5: u/tiny/events.out.tfevents.[0-9]*\.[^:]*: writing the event of step 5 failed" \
		out.txt || fail "a failed event write: $(cat out.txt)"
	run u 2 "$mixed" run.ckpt_every=4 --resume
	python3 "$reader" u/tiny --require $need || fail "resumed after a failed event write"
	# sweep passes it to every run, and the job array's tasks
	for s in sn sy; do
		printf '[sweep]\nbase = %s\nout = %s\n[grid]\nmodel.layers = dense x 2 | dense, mod\n' \
			"$config" "$s" >"$s.ini"
	done
	short='run.steps=4 run.eval_every=4'
	mpirun -n 1 "$exe" sweep sn.ini --no-tensorboard --no-report $short >s.txt 2>&1 ||
		fail "sweep --no-tensorboard: $(cat s.txt)"
	ls sn/*/events.out.tfevents.* 2>/dev/null && fail "sweep --no-tensorboard wrote event files"
	"$exe" sweep sn.ini --no-tensorboard --slurm-array a.sbatch $short >s.txt 2>&1 ||
		fail "--slurm-array: $(cat s.txt)"
	grep -q -- "--no-tensorboard --only" a.sbatch || fail "the array's tasks lack --no-tensorboard"
	expect 2 "--dry-run trains nothing: --no-tensorboard would change nothing" \
		"$exe" sweep sn.ini --no-tensorboard --dry-run
	mpirun -n 1 "$exe" sweep sy.ini --no-report $short >s.txt 2>&1 || fail "sweep: $(cat s.txt)"
	for d in sy/*/; do python3 "$reader" "$d" --require metrics/loss || fail "sweep run $d"; done
	;;
*)
	fail "unknown test $test_name"
	;;
esac
echo "PASS: io-$test_name"
