#!/bin/sh
# The main demo: install what is missing, build, fetch the Brown corpus, train
# staged MoDE (experiments/staged.ini) under MPI with 8 ranks, one expert
# each (oversubscribed on machines with fewer cores), then draw its routing
# heatmap and router weights and print the held-out losses.
set -eu
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
[ -d build ] || meson setup build -Dbuildtype=release
meson compile -C build
BROWN_CONVERT=build/experiments/brown-convert ./scripts/fetch-brown.sh
# Open MPI refuses root unless told; more ranks than cores need oversubscribe;
# waiting ranks must yield their core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun -n 8 build/experiments/mode-exp experiments/staged.ini --threads 1 "$@"
build/analysis/mode-analyze heatmap out/staged/run.h5
build/analysis/mode-analyze weights out/staged/run.h5
build/analysis/mode-analyze tokens out/staged/run.h5
build/experiments/mode-exp eval out/staged/ckpt.h5 --mode topk
build/experiments/mode-exp eval out/staged/ckpt.h5 --mode causal
