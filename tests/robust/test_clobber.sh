#!/bin/sh
# Outputs never destroy inputs (core/util/outfile.h; docs/robustness.md):
# an output that is one of the command's inputs (by path, symlink, hard
# link or another spelling) or one of a run's own files is refused before
# anything is written; an output is written to a temporary and renamed, so
# a full disk keeps the old file whole; a tokenizer's set (OUT.model,
# OUT.bin, OUT.pos) is replaced whole or not at all, even when a SIGTERM
# lands during SentencePiece's training.  Paths: eval --record, --csv and
# --dial's CSV, tokenize, brown-convert, mode-analyze, training.
#   test_clobber.sh MODE_EXP MODE_ANALYZE|none BROWN_CONVERT CONFIG
set -u
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$1") config=$(abspath "$4")
analyze=$(abspath_or_none "$2")
convert=$(abspath "$3")
enter_workdir

same() { cmp -s "$1" "$2" || fail "$1 changed: $3"; }
no_temps() { ls "$1" | grep -q 'tmp' && fail "a temporary was left in $1: $(ls "$1")"; return 0; }
input="one of this command's inputs; an output never replaces an input"

# a MoD run on a text corpus (its routing is what --record and --routing read)
awk 'BEGIN { srand(3); for (i = 0; i < 9000; i++) { w = ""; l = 1 + int(rand() * 8)
	for (j = 0; j < l; j++) w = w sprintf("%c", 97 + int(rand() * rand() * 26))
	printf "%s%s", w, (i % 13 == 12) ? ".\n" : " " } }' >corpus.txt
"$exe" "$config" run.out=m 'model.layers=(dense, mod) x 2' mod.capacity=0.25 \
	data.source=corpus.txt run.steps=8 --quiet || fail "training"
ck=m/tiny/ckpt.h5
cp $ck ckpt.orig
cp m/tiny/run.h5 run.orig

# 1. the issue's example: --record over the checkpoint it evaluates
expect 2 "$ck: refused as an output: it is $ck, $input" \
	"$exe" eval $ck --windows 4 --mode topk --record $ck
same $ck ckpt.orig "eval --record over its checkpoint"
"$exe" eval $ck --windows 4 >/dev/null 2>&1 || fail "the checkpoint no longer evaluates"
# other spellings: a symlink, a hard link, ./x/../x, and the run's run.h5
ln -s $ck link.h5
ln $ck hard.h5
expect 2 "link.h5: refused as an output: it is the same file as $ck, $input" \
	"$exe" eval $ck --windows 4 --mode topk --routing random --record link.h5
expect 2 "hard.h5: refused as an output: it is the same file as $ck" \
	"$exe" eval $ck --windows 4 --mode topk --routing random --csv hard.h5
expect 2 "refused as an output: it is one of the run's own files in .*m/tiny" \
	"$exe" eval $ck --windows 4 --mode topk --routing random --csv ./m/../m/tiny/run.h5
expect 2 "refused as an output: it is one of the run's own files" \
	"$exe" eval hard.h5 --windows 4 --mode topk --record m/tiny/run.h5
same m/tiny/run.h5 run.orig "eval --csv over the run's run.h5"
# the corpus through a hard link, and a replayed record
ln corpus.txt words.csv
cp corpus.txt corpus.orig
expect 2 "words.csv: refused as an output: it is the same file as corpus.txt, $input" \
	"$exe" eval $ck --windows 4 --mode topk --routing random --csv words.csv
same corpus.txt corpus.orig "eval --csv over the corpus"
"$exe" eval $ck --windows 4 --mode topk --record rec.h5 >/dev/null || fail "eval --record"
cp rec.h5 rec.orig
expect 2 "rec.h5: refused as an output: it is rec.h5, $input" \
	"$exe" eval $ck --windows 4 --mode topk --routing replay:rec.h5 --record rec.h5
same rec.h5 rec.orig "eval --record over its replayed record"
# the dial's CSV
expect 2 "hard.h5: refused as an output: it is the same file as $ck" \
	"$exe" eval $ck --windows 4 --dial mod.capacity=0.25,0.5 --csv hard.h5
same $ck ckpt.orig "eval --dial --csv over the checkpoint"
# training: --init-from the checkpoint that --overwrite would replace
expect 1 "$ck: refused as an output: it is $ck, $input" \
	"$exe" "$config" run.out=m 'model.layers=(dense, mod) x 2' mod.capacity=0.25 \
	data.source=corpus.txt run.steps=8 --quiet --overwrite --init-from $ck
same $ck ckpt.orig "training --overwrite --init-from its own checkpoint"

# 2. a full disk under eval --routing random --csv: the old table stays whole
if [ "$(id -u)" -eq 0 ] && mkdir small && mount -t tmpfs -o size=64k tmpfs small 2>/dev/null; then
	trap 'umount "$work/small" 2>/dev/null; rm -rf "$work"' EXIT
	"$exe" eval $ck --windows 4 --mode topk --routing random --csv small/cf.csv >/dev/null ||
		fail "eval --csv"
	cp small/cf.csv cf.orig
	head -c 1000000 /dev/zero >small/fill 2>/dev/null
	expect 1 "small/cf.csv: writing it failed (No space left on device); the file there before" \
		"$exe" eval $ck --windows 4 --mode topk --routing random --seed 9 --csv small/cf.csv
	same small/cf.csv cf.orig "a full disk cut the old CSV"
	no_temps small
	rm small/fill
	"$exe" eval $ck --windows 4 --mode topk --routing random --seed 9 --csv small/cf.csv \
		>/dev/null || fail "eval --csv with room again"
	cmp -s small/cf.csv cf.orig && fail "the CSV was not replaced once there was room"
	umount small
else
	echo "skipped the full disk: mounting a 64 KiB tmpfs needs root (docs/robustness.md)"
fi

# 3. the tokenizer's set: replaced whole or not at all
tr ' \n.a-z' '\000\000\001\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003' \
	<corpus.txt >corpus.pos
"$exe" tokenize corpus.txt BIG --vocab 1024 --labels corpus.pos >/dev/null 2>&1 ||
	fail "tokenize"
for f in BIG.model BIG.bin BIG.pos; do cp $f $f.orig; done
# stop_tokenize WHEN: a tokenize of 512 pieces over the set BIG, stopped by
# SIGTERM once WHEN holds; exit 143 and the old set whole
stop_tokenize() {
	"$exe" tokenize $text BIG --vocab 512 --labels $labels >tok.txt 2>&1 &
	pid=$!
	i=0
	while ! eval "$1" && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
	kill -TERM $pid
	wait $pid
	code=$?
	[ "$code" -eq 143 ] || fail "tokenize stopped by SIGTERM ($1): exit $code: $(cat tok.txt)"
	grep -q "stopped by signal 15 before BIG.\* was replaced" tok.txt ||
		fail "message: $(cat tok.txt)"
	for f in BIG.model BIG.bin BIG.pos; do same $f $f.orig "SIGTERM during tokenize ($1)"; done
	no_temps .
	echo "ok: SIGTERM during tokenize ($1): exit 143, BIG.model, BIG.bin, BIG.pos the old set"
}
# during SentencePiece's training
text=corpus.txt labels=corpus.pos
stop_tokenize "grep -q '# training' tok.txt"
# after it: once the new model is trained (held in memory; the files are
# written only after the round trip), while the text is encoded (a larger
# text, so that this takes a while)
i=0
while [ $i -lt 6 ]; do cat corpus.txt; i=$((i + 1)); done >big.txt
i=0
while [ $i -lt 6 ]; do cat corpus.pos; i=$((i + 1)); done >big.pos
text=big.txt labels=big.pos
stop_tokenize "grep -q '# trained; encoding' tok.txt"
# an output of the set that is its input: OUT.pos the labels
expect 2 "corpus.pos: refused as an output: it is corpus.pos, $input" \
	"$exe" tokenize corpus.txt corpus --vocab 512 --labels corpus.pos
same BIG.pos BIG.pos.orig "a refused tokenize"
# an output whose folder is not there: refused before the work (eval's
# table was computed, then lost; tokenize trained, then could not write)
expect 2 "nodir/x.csv: refused as an output: its folder nodir is not there" \
	"$exe" eval $ck --windows 4 --mode topk --routing random --csv nodir/x.csv
expect 2 "nodir/T.model: refused as an output: its folder nodir is not there" \
	"$exe" tokenize corpus.txt nodir/T --vocab 512
grep -q "# training" out.txt && fail "tokenize trained before refusing its output"
# brown-convert's text and labels
printf 'The/at dog/nn ran/vbd ./.\n' >tagged
cp tagged tagged.orig
expect 2 "tagged: refused as an output: it is tagged, $input" "$convert" t.txt tagged tagged
same tagged tagged.orig "brown-convert over its corpus file"

# 4. mode-analyze: an output over one of its inputs
if [ "$analyze" != none ]; then
	mkdir cf
	"$exe" eval $ck --windows 4 --mode topk --routing random --csv cf/counterfactual.csv \
		>/dev/null || fail "eval --csv"
	cp cf/counterfactual.csv cf.orig
	expect 1 "cf/counterfactual.csv: refused as an output: it is cf/counterfactual.csv, $input" \
		"$analyze" counterfactual cf/counterfactual.csv
	same cf/counterfactual.csv cf.orig "mode-analyze counterfactual over its input"
	no_temps cf
else
	echo "skipped mode-analyze: built without cairo"
fi
exit 0
