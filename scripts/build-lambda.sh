#!/usr/bin/env bash
# Builds the Lambda bootstrap as `sam build` does (cargo lambda build --release, zig) for one
# architecture, checks that it is an executable for that processor, prints its size, and starts
# it once to answer one invocation (arm64 under qemu-aarch64 on other machines).
#
#   scripts/build-lambda.sh arm64|x86_64
#
# The bootstrap lands in $CARGO_TARGET_DIR/lambda/gitstate-lambda/bootstrap (cargo-lambda's path
# for both architectures); a copy stays in $CARGO_TARGET_DIR/lambda/bootstrap-<arch>.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GITSTATE_TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gitstate-target}
arch=${1:?usage: scripts/build-lambda.sh arm64|x86_64}
case $arch in
    arm64) flags=(--arm64); machine=aarch64 ;;
    x86_64) flags=(--x86-64); machine=x86-64 ;;
    *) echo "build-lambda: unknown architecture $arch (arm64 or x86_64)" >&2; exit 2 ;;
esac
start=$SECONDS
PATH="$GITSTATE_TOOLS/cargo-lambda-venv/bin:$PATH" cargo lambda build --release "${flags[@]}" -p gitstate-lambda
bootstrap="$CARGO_TARGET_DIR/lambda/gitstate-lambda/bootstrap"
[ -x "$bootstrap" ] || { echo "build-lambda: cargo lambda build produced no $bootstrap" >&2; exit 1; }
# e_machine of the ELF header (bytes 18-19, little-endian): 0xb7 aarch64, 0x3e x86-64.
case $(od -An -tx1 -j18 -N2 "$bootstrap" | tr -d ' \n') in
    b700) built=aarch64 ;;
    3e00) built=x86-64 ;;
    *) built=unknown ;;
esac
[ "$built" = "$machine" ] || { echo "build-lambda: $bootstrap is for $built, not $machine" >&2; exit 1; }
cp "$bootstrap" "$CARGO_TARGET_DIR/lambda/bootstrap-$arch"
echo "build-lambda: $arch bootstrap built, $(stat -c %s "$bootstrap") bytes ($((SECONDS - start)) s)"

# It must start and answer: one invocation (GET /_/health) through a Runtime API on loopback,
# natively for x86_64, under qemu-aarch64 (user-mode emulation, Debian's qemu-user and
# libc6-arm64-cross) for arm64. The bench script fails unless the answer is a 200.
run="$CARGO_TARGET_DIR/lambda/bootstrap-$arch"
if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then
    command -v qemu-aarch64 >/dev/null || { echo "build-lambda: qemu-aarch64 is missing (apt-get install qemu-user libc6-arm64-cross)" >&2; exit 1; }
    run="$CARGO_TARGET_DIR/lambda/run-arm64.sh"
    printf '#!/bin/sh\nexec qemu-aarch64 -L /usr/aarch64-linux-gnu "%s" "$@"\n' "$CARGO_TARGET_DIR/lambda/bootstrap-arm64" > "$run"
    chmod +x "$run"
fi
python3 scripts/bench lambda-init --runs 1 --bootstrap "$run" --artifact "$CARGO_TARGET_DIR/lambda/bootstrap-$arch" | sed "s/^/build-lambda: $arch: /"
