#!/usr/bin/env bash
# Installs cargo-lambda and zig (PyPI cargo-lambda, ziglang; pinned) into their own venv under
# $GITSTATE_TOOLS/cargo-lambda-venv, for `cargo lambda build` and `cargo lambda watch`, and the
# Rust standard library for aarch64 (rustup), for the arm64 (Graviton) function.
# Idempotent; run by scripts/test.sh. Use them with:
#   PATH="$GITSTATE_TOOLS/cargo-lambda-venv/bin:$PATH" cargo lambda build --release --arm64 -p gitstate-lambda
#   PATH="$GITSTATE_TOOLS/cargo-lambda-venv/bin:$PATH" cargo lambda build --release -p gitstate-lambda   # x86_64
set -euo pipefail
TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
CARGO_LAMBDA_VERSION=1.9.2
ZIGLANG_VERSION=0.17.1
venv="$TOOLS/cargo-lambda-venv"
stamp="$venv/.installed-$CARGO_LAMBDA_VERSION-$ZIGLANG_VERSION"
if [ ! -e "$stamp" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "cargo-lambda==$CARGO_LAMBDA_VERSION" "ziglang==$ZIGLANG_VERSION"
    touch "$stamp"
fi
# The arm64 function is cross-compiled: zig links it, rustup supplies aarch64's std.
installed_targets=$(rustup target list --installed)
case $'\n'"$installed_targets"$'\n' in
    *$'\n'aarch64-unknown-linux-gnu$'\n'*) ;;
    *) rustup target add aarch64-unknown-linux-gnu ;;
esac
[ -x "$venv/bin/cargo-lambda" ] || { echo "install-lambda-tools: cargo-lambda missing in $venv" >&2; exit 1; }
echo "install-lambda-tools: cargo-lambda $CARGO_LAMBDA_VERSION, ziglang $ZIGLANG_VERSION in $venv; rust target aarch64-unknown-linux-gnu"
