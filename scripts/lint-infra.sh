#!/usr/bin/env bash
# Lints the SAM template with cfn-lint and `sam validate --lint` (each pinned, in its own venv
# under $GITSTATE_TOOLS). Run by scripts/test.sh; fails on any finding. Offline: no AWS call.
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

SAM_CLI_VERSION=1.170.0
sam_venv="$TOOLS/sam-$SAM_CLI_VERSION"
if ! "$sam_venv/bin/sam" --version 2>/dev/null | grep -q "$SAM_CLI_VERSION"; then
    rm -rf "$sam_venv"
    python3 -m venv "$sam_venv"
    "$sam_venv/bin/pip" install --quiet "aws-sam-cli==$SAM_CLI_VERSION"
fi
SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1} \
    "$sam_venv/bin/sam" validate --lint --template-file infra/template.yaml
echo "lint-infra: infra/template.yaml passes sam validate --lint (SAM CLI $SAM_CLI_VERSION)"
