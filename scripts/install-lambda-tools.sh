#!/usr/bin/env bash
# Installs cargo-lambda and zig (PyPI cargo-lambda, ziglang; pinned) into their own venv under
# $GITSTATE_TOOLS/cargo-lambda-venv, for `cargo lambda build` and `cargo lambda watch`.
# Idempotent; run by scripts/test.sh. Use them with:
#   PATH="$GITSTATE_TOOLS/cargo-lambda-venv/bin:$PATH" cargo lambda build --release -p gitstate-lambda
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
[ -x "$venv/bin/cargo-lambda" ] || { echo "install-lambda-tools: cargo-lambda missing in $venv" >&2; exit 1; }
echo "install-lambda-tools: cargo-lambda $CARGO_LAMBDA_VERSION, ziglang $ZIGLANG_VERSION in $venv"
