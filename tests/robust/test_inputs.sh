#!/bin/sh
# The inputs (issue 42): every input path through the one checked open,
# libraries included (core/util/file.h), and parsed text UTF-8 without NUL
# bytes or refused naming the line and byte (core/util/text.h).
#   test_inputs.sh TEST MODE_EXP MODE_ANALYZE|none CONFIG
# TEST: special | utf8 | all
set -u
test_name=$1
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$2") config=$(abspath "$4")
an=$(abspath_or_none "$3")
enter_workdir
cp "$config" tiny.ini


# words TAG N: N lines of a text of few distinct characters (so that 300
# pieces cover its characters and the 256 bytes), its words shuffled by TAG
words() {
	awk -v tag="$1" -v n="$2" 'BEGIN { split("the cat sat on a mat and ran to see " tag \
		" dog", w, " "); s = length(tag) * 7 + 3
		for (i = 0; i < n; i++) { line = ""
			for (j = 0; j < 12; j++) { s = (s * 1103515245 + 12345) % 2147483648
				line = line (j ? " " : "") w[1 + int(s / 65536) % 12] }
			print line } }'
}

special() {
	# the issue's examples: a FIFO as the text to tokenize is refused at
	# once (timeout turns a hang into exit 124), and so is a FIFO as its labels
	mkfifo f.txt f.pos f.model
	expect 1 "f.txt: not a regular file (a FIFO)" timeout 30 "$exe" tokenize f.txt F --vocab 300
	nothing_left F.model
	words x 200 >x.txt
	expect 1 "f.pos: not a regular file (a FIFO)" timeout 30 "$exe" tokenize x.txt F --vocab 300 \
		--labels f.pos
	# a path with ',' or ' ' is one path: SentencePiece is handed the text,
	# not a flag string.  c,d.txt holds x.txt's text, the decoys c and d.txt
	# another: the pieces are x.txt's, not those of c and d.txt together
	"$exe" tokenize x.txt X --vocab 300 >/dev/null || fail "tokenize x.txt"
	cp x.txt c,d.txt
	words y 100 >c
	words z 100 >d.txt
	cat c d.txt >decoys.txt
	"$exe" tokenize decoys.txt D --vocab 300 >/dev/null || fail "tokenize decoys.txt"
	expect 0 "wrote S.bin" "$exe" tokenize c,d.txt S --vocab 300
	cmp -s S.vocab X.vocab || fail "c,d.txt: pieces other than those of its text"
	cmp -s X.vocab D.vocab && fail "the decoys give x.txt's pieces: the test shows nothing"
	cmp -s S.bin X.bin || fail "c,d.txt: tokens other than those of its text"
	cp x.txt "a b.txt"
	expect 0 "wrote S p.bin" "$exe" tokenize "a b.txt" "S p" --vocab 300
	cmp -s "S p.vocab" X.vocab || fail "'a b.txt': pieces other than those of its text"
	# data.tokenizer a folder or a FIFO: a clear error, no abort, no hang
	mkdir dtok
	expect 1 "tokenizer dtok: not a regular file (a directory)" timeout 30 "$exe" tiny.ini \
		data.source=X.bin data.vocab=300 data.tokenizer=dtok run.out=o --quiet
	nothing_left o
	expect 1 "tokenizer f.model: not a regular file (a FIFO)" timeout 30 "$exe" tiny.ini \
		data.source=X.bin data.vocab=300 data.tokenizer=f.model run.out=o --quiet
	# a run with a tokenizer: eval's text to encode a FIFO
	"$exe" tiny.ini data.source=X.bin data.vocab=300 data.tokenizer=X.model run.out=t \
		run.steps=2 --quiet || fail "training with the tokenizer"
	expect 1 "f.txt: not a regular file (a FIFO)" timeout 30 "$exe" eval t/tiny/ckpt.h5 --data f.txt
	# the analysis' tables and run files too
	if [ "$an" != none ]; then
		mkfifo cf.csv
		expect 1 "cf.csv: not a regular file (a FIFO)" timeout 30 "$an" counterfactual cf.csv \
			--out cf
		mkfifo f.h5
		expect 1 "f.h5: not a regular file (a FIFO)" timeout 30 "$an" curves f.h5
	fi
}

utf8() {
	# UTF-8 is read: a byte-order mark and a comment in French
	{ printf '\357\273\277# caf\303\251\n'; cat tiny.ini; } >bom8.ini
	"$exe" bom8.ini run.out=u run.steps=2 "model.layers=(dense, mod) x 2" --quiet ||
		fail "a UTF-8 config with a BOM"
	# the issue's examples: UTF-16 (big- and little-endian, with a byte-order
	# mark) and a line that starts with a NUL: refused, exit 2, naming the
	# line and the byte; nothing trained
	iconv -f UTF-8 -t UTF-16BE tiny.ini >be.ini || fail "iconv"
	iconv -f UTF-8 -t UTF-16 tiny.ini >bom16.ini || fail "iconv"
	expect 2 "be.ini:1: byte offset 0 of the line (0 of the file) is 0x00, a NUL byte" \
		"$exe" be.ini run.out=o --quiet
	nothing_left o
	expect 2 "bom16.ini:1: byte offset 0 of the line (0 of the file) is 0xff, a UTF-16 byte-order mark" \
		"$exe" bom16.ini run.out=o --quiet
	{ printf '\000'; cat tiny.ini; } >nul.ini
	expect 2 "nul.ini:1: byte offset 0 of the line (0 of the file) is 0x00, a NUL byte" \
		"$exe" nul.ini run.out=o --quiet
	# a NUL inside a line: "steps = 2\0 4" is not steps = 2
	sed 's/^steps = 24$/steps = 2@4/' tiny.ini | tr '@' '\000' >mid.ini
	expect 2 "mid.ini:5: byte offset 9 of the line (.* of the file) is 0x00, a NUL byte" \
		"$exe" mid.ini run.out=o --quiet
	# Latin-1 in a line, an override that is not UTF-8
	sed 's/^name = tiny$/name = caf@/' tiny.ini | tr '@' '\351' >latin.ini
	expect 2 "latin.ini:3: byte offset 10 of the line (.* of the file) is 0xe9, not UTF-8" \
		"$exe" latin.ini run.out=o --quiet
	expect 2 "command line: run.name=caf...: byte offset 12 is 0xe9, not UTF-8" \
		"$exe" tiny.ini "run.name=$(printf 'caf\351')" run.out=o --quiet
	nothing_left o
	# eval's overrides of a checkpoint's config (exit 1, as eval's other
	# refused overrides)
	expect 1 "command line: mod.capacity=0.5...: byte offset 16 is 0xe9, not UTF-8" \
		"$exe" eval u/tiny/ckpt.h5 "mod.capacity=$(printf '0.5\351')"
	# a sweep file, and a sweep's override: refused before any run
	printf '[sweep]\nbase = tiny.ini\nout = sw\n[grid]\nrun.seed = 1, 2\n' >grid.ini
	{ cat grid.ini; printf 'run.name = caf\351\n'; } >bad-sweep.ini
	expect 2 "bad-sweep.ini:6: byte offset 14 of the line (.* of the file) is 0xe9, not UTF-8" \
		"$exe" sweep bad-sweep.ini
	{ printf '\000'; cat grid.ini; } >nul-sweep.ini
	expect 2 "nul-sweep.ini:1: byte offset 0 of the line (0 of the file) is 0x00, a NUL byte" \
		"$exe" sweep nul-sweep.ini
	expect 2 "command line: run.name=x...: byte offset 10 is 0xc0, not UTF-8" \
		"$exe" sweep grid.ini "run.name=x$(printf '\300\200')"
	nothing_left sw
	# the tables mode-analyze reads back
	if [ "$an" != none ]; then
		{ printf 'checkpoint,mode,policy\n'; printf 'a\000,topk,random\n'; } >cf8.csv
		expect 1 "cf8.csv:2: byte offset 1 of the line (24 of the file) is 0x00, a NUL byte" \
			"$an" counterfactual cf8.csv --out cf
	fi
}

case $test_name in
special) special ;;
utf8) utf8 ;;
all)
	special
	utf8
	;;
*) fail "unknown test $test_name" ;;
esac
echo "PASS: $test_name"
