#!/bin/sh
# safetensors export and reading (docs/export.md).
#   test_safetensors.sh TEST MODE_EXP COMPARE_RUNS ST_LIE EXPERIMENTS_DIR TINY_INI
# kinds: every single-run config of experiments/ (every kind), a few steps
#   on synthetic data; HDF5 -> safetensors (--with-optim) -> HDF5 is bit for
#   bit (parameters and Adam moments), and eval of the safetensors file gives
#   the HDF5 checkpoint's loss, to the printed digit, in both modes.
# ranks: a 2-rank expert-sharded checkpoint exports whole, evaluates at 1
#   rank as the HDF5 checkpoint does, at 2 ranks too, samples the same greedy
#   tokens, and --init-from takes it as it takes the HDF5 file.
# lies: each lying header is refused naming the tensor, exit non-zero.
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") compare=$(abspath "$3") lie=$(abspath "$4")
experiments=$(cd "$5" && pwd) tiny=$(abspath "$6")
enter_workdir

# Under the sanitizers every config at a small shape and 2 windows an
# evaluation: the same tensors of every kind pass through the writer and both
# readers, in a third of the time (the kinds test took 3.2 min there).
windows=16 small=
[ -n "$sanitized" ] && windows=2 small="model.d_model=32 model.n_heads=2 model.d_ff=64 data.seq_len=32 data.batch=4"
same_eval() { # CKPT_A CKPT_B NP MODE: the same held-out loss line
	mpirun -n "$3" "$exe" eval "$1" --json --windows $windows --mode "$4" > a.json ||
		fail "eval $1 at $3 ranks"
	mpirun -n "$3" "$exe" eval "$2" --json --windows $windows --mode "$4" > b.json ||
		fail "eval $2 at $3 ranks"
	cmp -s a.json b.json || fail "eval $4 at $3 ranks: $1 gives $(cat a.json), $2 $(cat b.json)"
}

case $test_name in
kinds)
	for ini in "$experiments"/*.ini; do
		grep -q '^\[sweep\]' "$ini" && continue
		name=$(basename "$ini" .ini)
		"$exe" "$ini" data.source=synthetic data.mix=uniform data.tokenizer=none run.name="$name" run.out=runs \
			run.steps=3 run.ckpt_every=3 run.eval_every=0 run.routing_every=0 \
			run.final_eval_windows=$windows $small --quiet > "$name.log" 2>&1 ||
			fail "$name: training: $(tail -3 "$name.log")"
		ck=runs/$name/ckpt.h5
		"$exe" export "$ck" "$name" --with-optim || fail "$name: export"
		[ -s "$name.json" ] || fail "$name: no $name.json"
		"$exe" export "$name.safetensors" "$name.h5" || fail "$name: export back"
		"$compare" --tensors "$ck" "$name.h5" 0 > cmp.txt ||
			fail "$name: the round trip changed a tensor: $(cat cmp.txt)"
		for mode in topk causal; do same_eval "$ck" "$name.safetensors" 1 $mode; done
		echo "ok: $name: round trip bit for bit, eval equal"
	done
	;;
ranks)
	layers='model.layers=dense, moe, staged, integrated'
	mpirun -n 2 "$exe" "$tiny" run.out=r2 "$layers" run.steps=8 --quiet ||
		fail "2-rank training"
	ck=r2/tiny/ckpt.h5
	"$exe" export "$ck" x --with-optim || fail "export at 1 rank"
	mpirun -n 2 "$exe" export "$ck" y || fail "export at 2 ranks"
	"$exe" export x.safetensors back.h5 || fail "export back"
	"$compare" --tensors "$ck" back.h5 0 || fail "the round trip changed a tensor"
	cmp -s x.safetensors y.safetensors && fail "--with-optim wrote no moments"
	same_eval "$ck" x.safetensors 1 causal
	same_eval "$ck" x.safetensors 2 topk
	same_eval x.safetensors y.safetensors 2 causal
	# greedy sampling (every expert on each rank) gives the same tokens
	"$exe" sample "$ck" --prompt ab --tokens 16 --temperature 0 | head -1 > s1.txt
	"$exe" sample x.safetensors --prompt ab --tokens 16 --temperature 0 | head -1 > s2.txt
	[ -s s1.txt ] && cmp -s s1.txt s2.txt || fail "sample: $(cat s1.txt) against $(cat s2.txt)"
	mpirun -n 2 "$exe" "$tiny" run.out=i2 "$layers" run.steps=2 --init-from x.safetensors \
		--quiet || fail "--init-from a safetensors checkpoint"
	mpirun -n 2 "$exe" "$tiny" run.out=h2 "$layers" run.steps=2 --init-from "$ck" --quiet ||
		fail "--init-from the HDF5 checkpoint"
	"$compare" --tensors i2/tiny/ckpt.h5 h2/tiny/ckpt.h5 0 ||
		fail "--init-from: safetensors and HDF5 start differently"
	echo "ok: 2-rank checkpoint exported whole, evaluated at 1 and 2 ranks, --init-from"
	;;
lies)
	"$exe" "$tiny" run.out=o 'model.layers=dense, moe' run.steps=2 --quiet || fail training
	"$exe" export o/tiny/ckpt.h5 good || fail export
	"$exe" eval good.safetensors --windows 2 > /dev/null || fail "the honest file is refused"
	for l in past-end overlap hole dtype-size dtype shape huge missing duplicate json; do
		t=$("$lie" good.safetensors "$l" "$l.safetensors") || fail "st_lie $l"
		expect nz "$t" "$exe" eval "$l.safetensors" --windows 2
		expect nz "$t" mpirun -n 2 "$exe" eval "$l.safetensors" --windows 2
		expect nz "$t" "$exe" export "$l.safetensors" back.h5
	done
	expect nz "past the end" "$exe" eval past-end.safetensors
	expect nz "overlaps" "$exe" eval overlap.safetensors
	expect nz "a hole of 4 bytes" "$exe" eval hole.safetensors
	expect nz "dtype I32: expected F32" "$exe" eval dtype.safetensors
	expect nz "the config gives" "$exe" eval shape.safetensors
	expect nz "takes more than 2^64 bytes" "$exe" eval huge.safetensors
	expect nz "is missing" "$exe" eval missing.safetensors
	expect nz "named twice" "$exe" eval duplicate.safetensors
	expect nz "bad safetensors header" "$exe" eval json.safetensors
	head -c 100 good.safetensors > short.safetensors
	expect nz "not safetensors" "$exe" eval short.safetensors
	;;
*)
	fail "unknown test $test_name"
	;;
esac
