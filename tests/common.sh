# Sourced by the end-to-end test scripts: absolute paths, the Open MPI
# settings a root CI needs, a private work folder removed at exit, fail(),
# expect() and nothing_left().
abspath() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
# a program's path made absolute, or "none" (not built: mode-analyze without cairo)
abspath_or_none() { if [ "$1" = none ]; then echo none; else abspath "$1"; fi; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
# Under the sanitizers (scripts/test.sh sets MODE_TEST_SANITIZED) the longest
# tests train fewer steps: every code path they reach is reached in those,
# and memory errors do not need more; what they assert holds either way.
sanitized=${MODE_TEST_SANITIZED:-}
# enter_workdir: cd into a new temporary folder, removed when the script exits
enter_workdir() {
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cd "$work" || exit 1
}
# expect CODE PATTERN CMD...: the command exits with CODE (or any non-zero
# for "nz") and its output matches PATTERN.
expect() {
	want=$1 pat=$2
	shift 2
	"$@" >out.txt 2>&1
	got=$?
	if [ "$want" = nz ]; then [ "$got" -ne 0 ] || fail "exit 0 from: $*"; else
		[ "$got" -eq "$want" ] || fail "exit $got (expected $want) from: $* -- $(cat out.txt)"; fi
	grep -q -- "$pat" out.txt || fail "no '$pat' in the output of: $* -- $(cat out.txt)"
	echo "ok: $* -> exit $got: $(grep -m1 -- "$pat" out.txt)"
}
# no output folder may be left behind by a refused run
nothing_left() { [ -e "$1" ] && fail "a refused run left $1 behind"; return 0; }
