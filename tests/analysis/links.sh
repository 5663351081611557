#!/bin/sh
# mode-analyze links the kinds' descriptions (keys, tensors, FLOPs), never
# their compute: no kind's compute row (kind_ops), no forward or backward,
# no matrix product.  mode-exp, which trains, must show them all, so a
# check that sees nothing fails too.
#   links.sh MODE-ANALYZE MODE-EXP
set -u
analyze=$1 exe=$2
compute=' [TtDdRrBb] (mode_kind_ops|[a-z]+_ops|model_forward|model_backward|train_step|matmul_pool|sgemm|attn_forward)$'
described=' [TtDdRr] (mode_kinds|stack_flops_per_seq|key_parse)$'
fail=0
if ! command -v nm >/dev/null 2>&1; then
	echo "links: nm (binutils) is missing"
	exit 1
fi
found=$(nm "$analyze" | grep -E "$compute")
if [ -n "$found" ]; then
	echo "links: mode-analyze links compute it never runs:"
	echo "$found"
	fail=1
fi
if [ "$(nm "$analyze" | grep -cE "$described")" -ne 3 ]; then
	echo "links: mode-analyze lacks the kinds' descriptions (mode_kinds, stack_flops_per_seq, key_parse)"
	fail=1
fi
# the same check on mode-exp must find the compute rows and the products
for s in mode_kind_ops dense_ops model_forward matmul_pool sgemm; do
	if ! nm "$exe" | grep -qE " [TtDdRrBb] $s\$"; then
		echo "links: the check does not see $s in mode-exp: it would see nothing in mode-analyze either"
		fail=1
	fi
done
[ $fail -eq 0 ] && echo "links: mode-analyze holds the kinds' descriptions and none of their compute"
exit $fail
