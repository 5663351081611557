#!/bin/sh
# Install the Debian 12 packages mode needs, only those that are missing.
# Works as root or through sudo.  Safe to run again: it does nothing when
# everything is present.
set -eu

PKGS="meson ninja-build pkg-config gcc g++ libopenblas-dev libopenmpi-dev openmpi-bin
libhdf5-openmpi-dev hdf5-tools libinih-dev libcairo2-dev libcmocka-dev libpcg-cpp-dev
libsentencepiece-dev sentencepiece libgsl-dev
clang libclang-rt-14-dev valgrind
iproute2
python3-torch python3-h5py"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
echo "setup: installing$missing"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
