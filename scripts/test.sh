#!/bin/sh
# Install what is missing, build, and run the whole test suite: a release
# build with warnings as errors, its tests run under the OpenBLAS kernels
# this machine picks and again (all but the robust suite) under a second
# kernel set (a test that holds on one CPU family only must not pass); an
# AddressSanitizer + UndefinedBehaviorSanitizer build (all but the fault
# injections; leaks in one test of every command); the libFuzzer targets.
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."

./scripts/setup-deps.sh || { echo "setup failed"; exit 1; }

# Open MPI refuses root unless told, and more ranks than cores unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Oversubscribed ranks must yield, not spin, or they starve each other.
export OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1

passed=0
failed=0
test_args=""
skips=""

run_suite() { # name, build dir, meson setup options...
	name=$1 dir=$2
	shift 2
	echo "== $name build"
	if ! { [ -d "$dir" ] && meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1; } &&
		! meson setup --wipe "$dir" "$@" >"$dir.setup.log" 2>&1 &&
		! meson setup "$dir" "$@" >"$dir.setup.log" 2>&1; then
		cat "$dir.setup.log"
		echo "$name: meson setup failed"
		failed=$((failed + 1))
		return
	fi
	if ! meson compile -C "$dir"; then
		echo "$name: build failed"
		failed=$((failed + 1))
		return
	fi
	run_tests "$dir" "$dir.test.log"
}

run_tests() { # build dir, log: meson test, counted into passed and failed
	dir=$1 log=$2
	# shellcheck disable=SC2086
	meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 $test_args 2>&1 |
		tee "$log"
	ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log")
	bad=0
	for key in Fail Timeout "Unexpected Pass"; do
		n=$(sed -n "s/^$key: *\([0-9]*\).*/\1/p" "$log")
		bad=$((bad + ${n:-0}))
	done
	if [ -z "$ok" ]; then
		echo "$dir: meson test gave no summary"
		bad=$((bad + 1))
	fi
	passed=$((passed + ${ok:-0}))
	failed=$((failed + bad))
	# every skipped test, with the reason it printed ("skipped: ...")
	skips="$skips$(list_skips "$dir" "$log")"
}

# list_skips DIR LOG: "  DIR NAME: REASON" for each test meson reported as
# skipped in this run (meson-logs/testlog.json, one JSON object a line).
list_skips() {
	python3 - "$1/meson-logs/testlog.json" "$1${OPENBLAS_CORETYPE:+ ($OPENBLAS_CORETYPE kernels)}" <<'PY'
import json, sys
path, label = sys.argv[1], sys.argv[2]
try:
    lines = open(path).read().splitlines()
except OSError:
    lines = []
for line in lines:
    try:
        t = json.loads(line)
    except ValueError:
        continue
    if t.get("result") != "SKIP":
        continue
    why = [l for l in (t.get("stdout") or "").splitlines() if l.startswith("skipped")]
    print("\n  %s %s: %s" % (label, t.get("name"),
                             why[-1] if why else "(the test gave no reason)"), end="")
PY
}

# Without -march=native, so that valgrind (which does not know AVX-512) can
# run the memcheck test on it.
run_suite release build-ci -Dwerror=true -Dbuildtype=release -Dnative=false

# The same tests under a second OpenBLAS kernel set.  Its kernels may sum a
# row of a product in another order for another row count (FACTS.md), so
# this is where a test that asserts bits the code does not make equal by
# construction fails.  The machine's own set is what OpenBLAS picks here
# (OPENBLAS_CORETYPE included, when the environment sets it); the second
# is Haswell (AVX2), or, when the machine runs Haswell's kernels already
# (AVX2-only CPUs, AMD Zen 1-3, or an environment that sets them), SkylakeX
# where the CPU has AVX-512, else Sandybridge (AVX).
own=$(build-ci/experiments/mode-exp --version 2>/dev/null | sed -n 's/^openblas kernels: //p')
has() { grep -qw "$1" /proc/cpuinfo; }
case $own in
Haswell | Zen)
	if has avx512f; then second=SkylakeX; else second=Sandybridge; fi ;;
*)
	if has avx2; then second=Haswell; elif has avx; then second=Sandybridge; else second=Nehalem; fi ;;
esac
echo "== release tests under OpenBLAS's $second kernels (this machine's own: ${own:-unknown})"
# Not again: valgrind (it sets its own kernels) and the robust suite, whose
# tests check files, signals and faults, not numbers.
# Nor the analysis and sweep suites: they check tables, figures and runs
# against the run files the same build wrote, equal by construction on any
# kernel set; the numbers are the unit, cli and mpi suites'.
# Nor the cli tests of options and files (balance, upcycle, tokens: suite
# plumbing), whose numbers the moe and ranks tests already check here.
# Nor the file formats' round trips (safetensors, llm.c tokens, TensorBoard
# events: suite plumbing too), written and read by the same build.  Nor the
# PyTorch twin (suite twin): it holds mode-exp to a second implementation
# within 1e-5 relative; the kernel sets are held to their plain references
# by the unit tests, which run here.
test_args="--no-suite valgrind --no-suite robust --no-suite analysis --no-suite sweep --no-suite plumbing --no-suite twin"
OPENBLAS_CORETYPE=$second run_tests build-ci build-ci.$second.test.log
test_args=""
# Leaks are checked by one test of this build (tests/sanitize/leaks.sh: every
# command, with the slow unwinder that can tell Open MPI's own allocations
# from ours); the others run without, at half the time.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The fault injections end every rank with MPI_Abort; the release build runs
# them.  The signal-during-evaluation test trains and evaluates 3124 windows
# ten times (40 s in release, 3 min under the sanitizers): release only too,
# with sweep-evalcut (a signal in a sweep's last evaluation: 25 s in
# release, 67 s here), suite robust-eval both.
# The longest tests train fewer steps there (MODE_TEST_SANITIZED,
# tests/common.sh).  The PyTorch twin runs in the release build only: it
# drives export, eval and sample, which the safetensors and cli tests run
# under the sanitizers, and under them it took 2.4 minutes of torch.
test_args="--no-suite faults --no-suite robust-eval --no-suite twin"
export MODE_TEST_SANITIZED=1
run_suite sanitize build-asan -Dwerror=true -Dbuildtype=debugoptimized \
	-Db_sanitize=address,undefined -Db_lundef=false

# libFuzzer targets: clang, sanitizers, bounded runs from fixed seeds.
unset ASAN_OPTIONS MODE_TEST_SANITIZED
export CC=clang CXX=clang++ # one compiler's sanitizer runtime for C and C++
test_args="--suite fuzz"
run_suite fuzz build-fuzz -Dwerror=true -Dbuildtype=debugoptimized -Dfuzz=true \
	-Db_sanitize=address,undefined -Db_lundef=false
unset CC CXX

if [ -n "$skips" ]; then
	echo "skipped (neither passed nor failed; each says why):$skips"
else
	echo "skipped: none"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
