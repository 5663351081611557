#!/bin/sh
# valgrind memcheck of a short training run (every kind), then of eval and
# sample on its checkpoint: any memory error fails.  Needs a build without
# -march=native (valgrind does not know AVX-512), and OpenBLAS told to use
# its AVX2 kernels for the same reason.
set -u
exe=$1 config=$2
case $exe in /*) ;; *) exe=$(pwd)/$exe ;; esac
case $config in /*) ;; *) config=$(pwd)/$config ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
vg() { valgrind --error-exitcode=99 --leak-check=no --quiet "$@"; }
vg "$exe" "$config" 'model.layers=dense, mod, staged, integrated' moe.experts=2 run.steps=3 \
	run.eval_every=3 run.routing_every=3 run.out=v --quiet || { echo "FAIL: train"; exit 1; }
vg "$exe" eval v/tiny/ckpt.h5 --windows 2 >/dev/null || { echo "FAIL: eval"; exit 1; }
vg "$exe" sample v/tiny/ckpt.h5 --prompt "ab" --tokens 4 >/dev/null || { echo "FAIL: sample"; exit 1; }
echo "memcheck: no errors"
