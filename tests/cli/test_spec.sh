#!/bin/sh
# Self-speculative decoding (sample --speculative, docs/speculative.md): a
# tiny model with an exit point after its first layer, trained 300 steps so
# its draft is right part of the time; on several prompts and draft lengths
# the speculative output must be the whole model's greedy tokens (plain
# sample with an exit threshold no token passes), with an acceptance rate
# in [0, 1] printed and below 1 at least once (rollback exercised), and the
# bench's tokens/s both given.  Refusals exit 2 naming the option.
#   test_spec.sh MODE_EXP CONFIG
set -u
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$1") config=$(abspath "$2")
enter_workdir

"$exe" "$config" "model.layers=dense, exit, dense, dense" run.steps=300 run.out=out \
	run.name=sx --quiet >train.txt 2>&1 || { cat train.txt; fail "training the exit model"; }
ck=out/sx/ckpt.h5
below=0
for pr in 1,2,3 5,9 7,7,7,1 40 12,60,3,3,8; do
	for k in 1 3 6; do
		"$exe" sample $ck --prompt-ids $pr --tokens 24 --temperature 0 --ids \
			--speculative auto --draft $k >s.txt 2>&1 || { cat s.txt; fail "speculative $pr K=$k"; }
		"$exe" sample $ck --prompt-ids $pr --tokens 24 --temperature 0 --ids \
			exit.threshold=1.01 >p.txt 2>&1 || { cat p.txt; fail "plain $pr"; }
		[ "$(head -n 1 s.txt)" = "$(head -n 1 p.txt)" ] ||
			fail "prompt $pr K=$k: speculative $(head -n 1 s.txt) against whole model $(head -n 1 p.txt)"
		rate=$(sed -n 's/.*acceptance rate \([0-9.]*\)).*/\1/p' s.txt)
		[ -n "$rate" ] || fail "no acceptance rate: $(cat s.txt)"
		awk -v r="$rate" 'BEGIN { exit !(r >= 0 && r <= 1) }' || fail "acceptance rate $rate"
		awk -v r="$rate" 'BEGIN { exit !(r < 1) }' && below=1
	done
done
[ $below = 1 ] || fail "every draft accepted: no rollback exercised"
"$exe" sample $ck --prompt-ids 1,2 --tokens 20 --temperature 0 --ids --speculative 1 \
	--bench 2 >b.txt 2>&1 || { cat b.txt; fail "bench"; }
grep -q "speculative [0-9.]* tokens/s, whole model a token at a time [0-9.]* tokens/s" b.txt ||
	fail "no tokens/s: $(cat b.txt)"

# refuse ARGS... NEEDLE: exit 2 with NEEDLE in the message
refuse() {
	needle=$1
	shift
	"$exe" sample "$@" >r.txt 2>&1
	rc=$?
	[ $rc -eq 2 ] || { cat r.txt; fail "$*: exit $rc, not 2"; }
	grep -q -- "$needle" r.txt || fail "$*: no '$needle' in $(cat r.txt)"
}
refuse --temperature $ck --prompt-ids 1 --tokens 4 --speculative auto
refuse --temperature $ck --prompt-ids 1 --tokens 4 --speculative auto --temperature 0.7
refuse "--speculative 2" $ck --prompt-ids 1 --tokens 4 --speculative 2 --temperature 0
refuse "--speculative 9" $ck --prompt-ids 1 --tokens 4 --speculative 9 --temperature 0
refuse "--speculative x" $ck --prompt-ids 1 --tokens 4 --speculative x --temperature 0
refuse "--draft 0" $ck --prompt-ids 1 --tokens 4 --speculative auto --draft 0 --temperature 0
refuse "--draft" $ck --prompt-ids 1 --tokens 4 --draft 2 --temperature 0
refuse "--tokens" $ck --prompt-ids 1 --tokens 40 --speculative auto --temperature 0
"$exe" "$config" run.out=out run.name=plain --quiet >t2.txt 2>&1 || fail "training dense"
refuse "--speculative auto" out/plain/ckpt.h5 --prompt-ids 1 --tokens 4 --speculative auto \
	--temperature 0
echo "OK"
