#!/usr/bin/env bash
# THE test command (CI runs it through .ci/run): installs the test components, builds the
# workspace and runs every test, unit to end-to-end (real git servers, real Terraform).
#
#   GITSTATE_TOOLS    where scripts/install-test-deps.sh installs (default ~/.cache/gitstate-tools)
#   CARGO_TARGET_DIR  build directory (default ~/.cache/gitstate-target, kept warm between runs)
#   extra arguments   passed to the test runner, e.g. scripts/test.sh -p gitstate-tests terraform
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export GITSTATE_TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gitstate-target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

start=$SECONDS
bash scripts/install-test-deps.sh
echo "test.sh: test components ready ($((SECONDS - start)) s)"

bash scripts/lint-infra.sh
# No two modules import each other (ARCHITECTURE.md, invariants).
python3 scripts/check-imports.py

# The Lambda function as SAM builds it (cargo-lambda with zig, the release profile): arm64, the
# template's default, then x86_64, which stays at the bootstrap path for the scripts that run it.
bash scripts/install-lambda-tools.sh
bash scripts/build-lambda.sh arm64
bash scripts/build-lambda.sh x86_64
# tests/tests/lambda_deadline.rs runs this bootstrap against its own Runtime API.
export GITSTATE_LAMBDA_BIN="$CARGO_TARGET_DIR/lambda/bootstrap-x86_64"

# The end-to-end tests drive a release build of `gitstate`, the binary users run (overflow checks
# and debug assertions off, as in production).
start=$SECONDS
cargo build --release -p gitstate
export GITSTATE_BIN="$CARGO_TARGET_DIR/release/gitstate"
[ -x "$GITSTATE_BIN" ] || { echo "test.sh: $GITSTATE_BIN was not built" >&2; exit 1; }
echo "test.sh: release gitstate built ($((SECONDS - start)) s)"

if [ $# -gt 0 ]; then
    filter=("$@")
else
    filter=(--workspace)
fi

if cargo nextest --version >/dev/null 2>&1; then
    # Doc tests first (nextest does not run them), so the nextest summary is the closing line.
    if [ $# -eq 0 ]; then
        cargo test --workspace --doc --quiet
    fi
    echo "test.sh: running tests with cargo nextest"
    cargo nextest run --no-fail-fast "${filter[@]}"
else
    cargo test --no-fail-fast "${filter[@]}"
fi
