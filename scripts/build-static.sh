#!/usr/bin/env bash
# Builds tidemark-mirror and tidemark-inventory as static x86_64 musl binaries into DIR
# (default: target/static). Needs musl-tools and protobuf-compiler (Debian package names)
# and the rustup target x86_64-unknown-linux-musl. The Dockerfile runs this script.
set -euo pipefail
out="${1:-target/static}"
target=x86_64-unknown-linux-musl
cd "$(dirname "$0")/.."
if ! command -v musl-gcc >/dev/null; then
  echo "build-static: musl-gcc not found; install musl-tools (apt-get install musl-tools)" >&2
  exit 2
fi
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "build-static: rustup target $target missing; run: rustup target add $target" >&2
  exit 2
fi
export CC_x86_64_unknown_linux_musl=musl-gcc
cargo build --release --locked --target "$target" \
  -p tidemark-etcd --bin tidemark-mirror \
  -p tidemark-kube --bin tidemark-inventory
mkdir -p "$out"
for bin in tidemark-mirror tidemark-inventory; do
  cp "${CARGO_TARGET_DIR:-target}/$target/release/$bin" "$out/$bin"
  # A static binary has no interpreter; refuse to ship anything else.
  if file "$out/$bin" | grep -q "dynamically linked"; then
    echo "build-static: $out/$bin is dynamically linked" >&2
    exit 1
  fi
done
echo "build-static: $(ls "$out")  in $out"
