#!/bin/sh
# Install what is missing, build, and run the whole test suite twice: a
# release build with warnings as errors, and an AddressSanitizer +
# UndefinedBehaviorSanitizer build.  Ends with "N passed, N failed".
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
	# shellcheck disable=SC2086
	meson test -C "$dir" --print-errorlogs --num-processes 2 $test_args 2>&1 | tee "$dir.test.log"
	ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$dir.test.log")
	bad=0
	for key in Fail Timeout "Unexpected Pass"; do
		n=$(sed -n "s/^$key: *\([0-9]*\).*/\1/p" "$dir.test.log")
		bad=$((bad + ${n:-0}))
	done
	if [ -z "$ok" ]; then
		echo "$name: meson test gave no summary"
		bad=$((bad + 1))
	fi
	passed=$((passed + ${ok:-0}))
	failed=$((failed + bad))
}

# Without -march=native, so that valgrind (which does not know AVX-512) can
# run the memcheck test on it.
run_suite release build-ci -Dwerror=true -Dbuildtype=release -Dnative=false
# LeakSanitizer reports Open MPI's and OpenBLAS's own allocations at exit,
# which are not ours to fix; leaks in our code are covered by the valgrind run.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite sanitize build-asan -Dwerror=true -Dbuildtype=debugoptimized \
	-Db_sanitize=address,undefined -Db_lundef=false

# libFuzzer targets: clang, sanitizers, bounded runs from fixed seeds.
unset ASAN_OPTIONS
export CC=clang
test_args="--suite fuzz"
run_suite fuzz build-fuzz -Dwerror=true -Dbuildtype=debugoptimized -Dfuzz=true \
	-Db_sanitize=address,undefined -Db_lundef=false
unset CC

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
