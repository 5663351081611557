#!/bin/sh
# run_fuzz.sh FUZZER SEED_CORPUS RUNS: a bounded, reproducible libFuzzer run
# (fixed seed, fixed number of runs) over a copy of the seed corpus, so the
# source tree is never written.
set -u
fuzzer=$1 seeds=$2 runs=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$seeds/." "$work/"
# libhdf5 is not ours to fix: its own allocations on error paths are not
# reported (our leaks still are: they come through our frames).
# A huge size read from a malformed file makes malloc fail (NULL), as it
# would outside the sanitizer; the loaders must cope with that.
export ASAN_OPTIONS="allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
"$fuzzer" -seed=1 -runs="$runs" -max_len=120000 -timeout=20 -rss_limit_mb=4096 \
	-artifact_prefix="$work/" "$work"
rc=$?
ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null && echo "findings above"
exit $rc
