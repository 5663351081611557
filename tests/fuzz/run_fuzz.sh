#!/bin/sh
# run_fuzz.sh FUZZER SEED_CORPUS RUNS: a bounded, reproducible libFuzzer run
# (fixed seed, fixed number of runs) over a copy of the seed corpus, so the
# source tree is never written.
set -u
fuzzer=$1 seeds=$2 runs=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$seeds/." "$work/"
"$fuzzer" -seed=1 -runs="$runs" -max_len=120000 -timeout=20 -rss_limit_mb=4096 \
	-artifact_prefix="$work/" "$work"
rc=$?
ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null && echo "findings above"
exit $rc
