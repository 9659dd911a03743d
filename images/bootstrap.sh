#!/usr/bin/env bash
# Installs what nodeos needs on a fresh Debian machine (as root): the lab's host tools
# from Debian and a virtualenv (.venv) with nodeos, its test tooling (nodeos-devtools,
# tests/tooling/: nodeos-lab, nodeos-sim, nodeos-lincheck) and its test tools from PyPI.
# Idempotent: a second run installs nothing new.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

APT_PACKAGES=(
  qemu-system-x86 qemu-utils ovmf mmdebstrap debootstrap gdisk dosfstools mtools
  e2fsprogs iproute2 ethtool strace socat busybox-static cpio zstd kmod
  debian-archive-keyring
  nftables gcc libc6-dev
  prometheus
  rauc squashfs-tools openssl
  patchelf
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: need root to install Debian packages" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$top/.venv/bin/python" ]; then
  echo "bootstrap: creating $top/.venv"
  python3 -m venv "$top/.venv"
fi
stamp="$top/.venv/.nodeos-installed"
if [ ! -f "$stamp" ] || [ "$top/pyproject.toml" -nt "$stamp" ] || [ "$top/tests/tooling/pyproject.toml" -nt "$stamp" ]; then
  echo "bootstrap: installing nodeos, its test tooling and test tools into .venv"
  # Without the environment's notes on find-links folders it lacks (one line per package, dozens
  # on CI's machine): they filled the head of CI's log, which is all a cut log shows.
  quiet() { "$@" 2> >(grep -v -e "is ignored: it is neither a file nor a directory" >&2); }
  quiet "$top/.venv/bin/pip" install -q --upgrade pip
  quiet "$top/.venv/bin/pip" install -q -e "$top[dev,spdk]"
  # The test tooling, a distribution of its own (never in the product nor the image), editable
  # too; after the product, so that replacing a `nodeos` that still owned the tooling's commands
  # (before the move to tests/tooling/) cannot take them away again. It names no `nodeos`
  # dependency: the product it drives is this checkout's, never one from PyPI.
  quiet "$top/.venv/bin/pip" install -q -e "$top/tests/tooling"
  touch "$stamp"
fi
