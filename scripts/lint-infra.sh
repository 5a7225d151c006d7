#!/usr/bin/env bash
# Lints the SAM template with cfn-lint (pinned, in its own venv under $GITSTATE_TOOLS).
# Run by scripts/test.sh; fails on any finding.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
CFN_LINT_VERSION=1.58.0
venv="$TOOLS/cfn-lint-$CFN_LINT_VERSION"
if ! "$venv/bin/cfn-lint" --version 2>/dev/null | grep -q "$CFN_LINT_VERSION"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "cfn-lint==$CFN_LINT_VERSION"
fi
"$venv/bin/cfn-lint" infra/template.yaml
echo "lint-infra: infra/template.yaml passes cfn-lint $CFN_LINT_VERSION"
