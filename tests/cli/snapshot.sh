#!/bin/bash
# The behaviour of every kind, for refactors that must not change it.
#
#   tests/cli/snapshot.sh take BUILD OUT [NP]   every single-run config of
#       experiments/ (the sweep files are grids of the same kinds) trained on
#       synthetic data for 20 steps, checkpoints and routing records every 10,
#       at NP ranks (default 1), into OUT/runs/<name>/; mode-analyze report of
#       them into OUT/report/
#   tests/cli/snapshot.sh diff A B              the two snapshots' run files,
#       checkpoints and reports equal bit for bit, apart from wall times and
#       the provenance (host, start time, command line); exit 1 when not
#
# Used by hand around a change (take before, take after, diff); h5diff is in
# hdf5-tools.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1

take() {
    local build=$1 out=$2 np=${3:-1} bad=0
    build=$(cd "$build" && pwd)
    mkdir -p "$out" && out=$(cd "$out" && pwd)
    cd "$out" || exit 2
    for ini in "$here"/experiments/*.ini; do
        grep -q '^\[sweep\]' "$ini" && continue
        local name
        name=$(basename "$ini" .ini)
        if ! mpirun -n "$np" "$build/experiments/mode-exp" "$ini" data.source=synthetic data.mix=uniform \
            run.name="$name" run.out=runs run.steps=20 run.ckpt_every=10 run.routing_every=10 \
            run.eval_every=10 run.eval_windows=4 run.final_eval_windows=8 --quiet --overwrite \
            > "$name.log" 2>&1; then
            echo "snapshot: $name failed (see $out/$name.log)" >&2
            bad=1
        fi
    done
    "$build/analysis/mode-analyze" report runs --out report > report.log 2>&1 ||
        { echo "snapshot: report failed (see $out/report.log)" >&2; bad=1; }
    return $bad
}

same_h5() { # A B: equal but for timings and provenance
    h5diff -q --exclude-path /provenance --exclude-path /metrics/comm_s \
        --exclude-path /metrics/compute_s --exclude-path /metrics/tokens_per_s \
        --exclude-path /metrics/wall_s "$1" "$2" > /dev/null 2>&1
}

diff_snapshots() {
    local a=$1 b=$2 bad=0 f
    for f in $(cd "$a" && find runs report -type f -name '*.h5' | sort); do
        if [ ! -f "$b/$f" ]; then
            echo "only in $a: $f"
            bad=1
        elif ! same_h5 "$a/$f" "$b/$f"; then
            echo "differs: $f"
            h5diff --exclude-path /provenance --exclude-path /metrics/comm_s \
                --exclude-path /metrics/compute_s --exclude-path /metrics/tokens_per_s \
                --exclude-path /metrics/wall_s "$a/$f" "$b/$f" 2>&1 | grep -v '^ ' | head -5
            bad=1
        fi
    done
    for f in $(cd "$b" && find runs report -type f -name '*.h5'); do
        [ -f "$a/$f" ] || { echo "only in $b: $f"; bad=1; }
    done
    # the report's tables (figures are drawn from the same numbers; the
    # compare tables and the page carry each run's wall time and speed)
    if ! diff -r -q -x '*.png' -x '*.svg' -x 'compare*' -x report.html "$a/report" "$b/report"; then
        bad=1
    fi
    [ $bad = 0 ] && echo "snapshot: $a and $b agree bit for bit"
    return $bad
}

case "${1:-}" in
take) shift; take "$@" ;;
diff) shift; diff_snapshots "$@" ;;
*) sed -n 2,14p "$0" >&2; exit 2 ;;
esac
