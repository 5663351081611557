#!/bin/sh
# The main demo: install what is missing, build, fetch the Brown corpus, and
# train experiments/dense.ini on it under MPI (2 ranks, one BLAS thread each).
set -eu
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
[ -d build ] || meson setup build -Dbuildtype=release
meson compile -C build
BROWN_CONVERT=build/experiments/brown-convert ./scripts/fetch-brown.sh
# Open MPI refuses root unless told; more ranks than cores need oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun -n 2 build/experiments/mode-exp experiments/dense.ini --threads 1 "$@"
build/experiments/mode-exp eval out/dense/ckpt.h5 --mode causal
