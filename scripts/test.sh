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
python3 scripts/check-map.py
# The README's workload-identity examples (PyYAML from cfn-lint's environment, made just above).
"$GITSTATE_TOOLS/cfn-lint-1.58.0/bin/python" scripts/check-readme-examples.py

# The binaries the end-to-end tests drive, `gitstate` and the Lambda bootstrap, in the dev profile
# (overflow checks and debug assertions on; the hot crates optimized, see Cargo.toml): every
# dependency is then built once, for them and for the tests alike. Two invocations, so each binary
# gets the features it ships with (tests/tests/lambda.rs holds their features equal), and `cargo
# lambda watch` in that test reuses the bootstrap's build. The shipped binaries (the release
# profile: fat LTO; the bootstrap for both architectures as `sam build` makes it) are built by
# scripts/check-shipped.sh, which CI runs after this, and every end-to-end test runs again
# against them there (DECISIONS, "What is tested is what ships"). cargo-lambda is installed
# here too: tests/tests/lambda.rs runs `cargo lambda watch`.
bash scripts/install-lambda-tools.sh
start=$SECONDS
cargo build -p gitstate
cargo build -p gitstate-lambda
export GITSTATE_BIN=${GITSTATE_BIN:-$CARGO_TARGET_DIR/debug/gitstate}
# tests/tests/lambda_deadline.rs runs this bootstrap against its own Runtime API.
export GITSTATE_LAMBDA_BIN=${GITSTATE_LAMBDA_BIN:-$CARGO_TARGET_DIR/debug/gitstate-lambda}
for bin in "$GITSTATE_BIN" "$GITSTATE_LAMBDA_BIN"; do
    [ -x "$bin" ] || { echo "test.sh: $bin was not built" >&2; exit 1; }
done
echo "test.sh: gitstate and the Lambda bootstrap built ($((SECONDS - start)) s)"

if [ $# -gt 0 ]; then
    filter=("$@")
else
    filter=(--workspace)
fi

# Most end-to-end tests wait on other processes (git servers, Terraform): two tests per core
# (measured on 2 cores: 246 s against 325 s with one per core, same results).
export NEXTEST_TEST_THREADS=${NEXTEST_TEST_THREADS:-$(($(nproc) * 2))}
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
