#!/usr/bin/env bash
# Lints the SAM template with cfn-lint and `sam validate --lint` (each pinned, in its own venv
# under $GITSTATE_TOOLS). Run by scripts/test.sh; fails on any finding. Offline: no AWS call.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
# venv_tool NAME VERSION PACKAGE COMMAND: installs PACKAGE==VERSION into $TOOLS/NAME-VERSION once
# (checked by COMMAND --version) and prints the venv's bin directory.
venv_tool() {
    local version=$2 package=$3 command=$4 venv="$TOOLS/$1-$2"
    if ! "$venv/bin/$command" --version 2>/dev/null | grep -c "$version" >/dev/null; then
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "$package==$version" >&2
    fi
    echo "$venv/bin"
}

CFN_LINT_VERSION=1.58.0
cfn_bin=$(venv_tool cfn-lint "$CFN_LINT_VERSION" cfn-lint cfn-lint)
"$cfn_bin/cfn-lint" infra/template.yaml
echo "lint-infra: infra/template.yaml passes cfn-lint $CFN_LINT_VERSION"

SAM_CLI_VERSION=1.170.0
sam_bin=$(venv_tool sam "$SAM_CLI_VERSION" aws-sam-cli sam)
SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1} \
    "$sam_bin/sam" validate --lint --template-file infra/template.yaml
echo "lint-infra: infra/template.yaml passes sam validate --lint (SAM CLI $SAM_CLI_VERSION)"

# No default of the template deploys an open endpoint (issue 15): translated by samtranslator for
# every AuthMode, checked with conditions resolved.
SAM_CLI_TELEMETRY=0 "$sam_bin/python" scripts/check-template-auth.py infra/template.yaml

# The dashboard's body is JSON once its variables are filled in (CloudFormation would only find
# out at deploy time).
SAM_CLI_TELEMETRY=0 "$sam_bin/python" scripts/check-template-dashboard.py infra/template.yaml
