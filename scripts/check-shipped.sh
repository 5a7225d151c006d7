#!/usr/bin/env bash
# The shipped profile's binaries, built as they ship and run: CI runs this after scripts/test.sh.
#
# scripts/test.sh drives dev-profile binaries (fast to build, overflow checks and debug assertions
# on). This builds what users deploy, with the release profile itself:
#   - the Lambda bootstrap for arm64 and x86_64, as `sam build` makes it (cargo lambda build
#     --release, zig); each is checked to be an executable for its processor and answers one
#     invocation (arm64 under qemu-aarch64): scripts/build-lambda.sh;
#   - `cargo build --release -p gitstate`, the binary `cargo install` builds;
#   - the container image for amd64 and arm64 (static musl binaries, FROM scratch):
#     scripts/build-image.sh;
# then runs every end-to-end test again against them (tests/tests: real Terraform through
# `gitstate serve` on every git transport, TLS, the bootstrap's invocation deadline, the hostile
# remotes, ...), and the image's entrypoint as its user in its unpacked root filesystem.
#
#   GITSTATE_TOOLS, CARGO_TARGET_DIR   as for scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GITSTATE_TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gitstate-target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

bash scripts/install-test-deps.sh
bash scripts/install-lambda-tools.sh
bash scripts/build-lambda.sh arm64
bash scripts/build-lambda.sh x86_64

start=$SECONDS
cargo build --release -p gitstate
echo "check-shipped: release gitstate built ($((SECONDS - start)) s)"

export GITSTATE_BIN="$CARGO_TARGET_DIR/release/gitstate"
export GITSTATE_LAMBDA_BIN="$CARGO_TARGET_DIR/lambda/bootstrap-x86_64"
for bin in "$GITSTATE_BIN" "$GITSTATE_LAMBDA_BIN"; do
    [ -x "$bin" ] || { echo "check-shipped: $bin was not built" >&2; exit 1; }
done
# What ships has no symbol table (`strip = true`; a package override in Cargo.toml that does not
# say it again silently falls back to stripping debug info only).
for bin in "$GITSTATE_BIN" "$CARGO_TARGET_DIR/lambda/bootstrap-x86_64" "$CARGO_TARGET_DIR/lambda/bootstrap-arm64"; do
    if readelf -S "$bin" | grep -q '\.symtab'; then
        echo "check-shipped: $bin keeps its symbol table: [profile.release] strip is lost" >&2
        exit 1
    fi
done
start=$SECONDS
export GITSTATE_IMAGE="$CARGO_TARGET_DIR/image"
bash scripts/build-image.sh "$GITSTATE_IMAGE"
echo "check-shipped: container image built ($((SECONDS - start)) s)"

# The test binaries scripts/test.sh built (`--workspace`: the same features, nothing to rebuild),
# only the end-to-end package's tests.
e2e='package(gitstate-tests)'
export NEXTEST_TEST_THREADS=${NEXTEST_TEST_THREADS:-$(($(nproc) * 2))}
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast --workspace -E "$e2e"
    # The image's test is ignored where no image is built (scripts/test.sh).
    cargo nextest run --no-fail-fast --workspace --run-ignored only -E "$e2e & binary(image)"
else
    cargo test --no-fail-fast -p gitstate-tests
    cargo test --no-fail-fast -p gitstate-tests --test image -- --ignored
fi
