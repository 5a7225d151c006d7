#!/usr/bin/env python3
"""Checks that infra/template.yaml never deploys an open endpoint (issue 15, docs/SECURITY.md).

Run with the SAM CLI's Python (scripts/lint-infra.sh does): the template is translated by
samtranslator, as `sam deploy` would, once for every allowed AuthMode, and the resources that
CloudFormation would create are checked with their Conditions and Fn::If resolved:

- the default AuthMode is not `server`;
- with AuthMode=server, every Function URL uses AuthType AWS_IAM, every HTTP API route uses
  AuthorizationType AWS_IAM, and no Lambda permission is granted to the principal "*";
- with AuthMode=team, a Rule refuses the deployment when neither TeamTokenHashes nor TeamUsers
  is given (evaluated on the template's defaults);
- with ConfigText given (OIDC issuers), a generated Secrets Manager secret of at least 32
  characters is created and the function's GITSTATE_RUN_KEY resolves it, so every container
  shares one run key (DESIGN §6, §7); without ConfigText, neither.

Usage: check-template-auth.py [TEMPLATE]   (default: infra/template.yaml). Exit 1 on a finding.
"""

import copy
import os
import sys

# Offline: the translator only needs a region name for pseudo parameters.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samcli.yamlhelper import yaml_parse
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    def load(self):
        return {}


def evaluate(value, params, conditions):
    """Resolves Ref (parameters), Fn::If/Equals/Not/And/Or and Condition; leaves the rest."""
    if isinstance(value, list):
        return [evaluate(v, params, conditions) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, arg), = value.items()
        if key == "Ref" and isinstance(arg, str) and arg in params:
            return params[arg]
        if key == "Condition" and isinstance(arg, str):
            return condition(arg, params, conditions)
        if key == "Fn::Equals":
            a, b = (evaluate(v, params, conditions) for v in arg)
            return a == b
        if key == "Fn::Not":
            return not evaluate(arg[0], params, conditions)
        if key == "Fn::And":
            return all(evaluate(v, params, conditions) for v in arg)
        if key == "Fn::Or":
            return any(evaluate(v, params, conditions) for v in arg)
        if key == "Fn::If":
            name, then, otherwise = arg
            chosen = then if condition(name, params, conditions) else otherwise
            return evaluate(chosen, params, conditions)
    return {k: evaluate(v, params, conditions) for k, v in value.items()}


def condition(name, params, conditions):
    if name not in conditions:
        raise SystemExit(f"check-template-auth: unknown condition {name}")
    result = evaluate(conditions[name], params, conditions)
    if not isinstance(result, bool):
        raise SystemExit(f"check-template-auth: condition {name} does not evaluate to true/false: {result!r}")
    return result


def defaults(template):
    return {name: str(p.get("Default", "")) for name, p in template.get("Parameters", {}).items()}


def deployed(template, params):
    """The resources CloudFormation creates for `params`, conditions resolved."""
    packaged = copy.deepcopy(template)
    # As `sam package` leaves it: code in S3 (the code itself does not matter here).
    for resource in packaged.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {})["CodeUri"] = "s3://bucket/gitstate.zip"
    translated = transform(packaged, params, NoManagedPolicies())
    conditions = translated.get("Conditions", {})
    out = {}
    for name, resource in translated.get("Resources", {}).items():
        if "Condition" in resource and not condition(resource["Condition"], params, conditions):
            continue
        out[name] = evaluate(resource, params, conditions)
    return out


def run_key_findings(template, params):
    """What is wrong with the run key the stack gives the function for `params`."""
    resources = deployed(template, params)
    secrets = {
        name: r for name, r in resources.items() if r.get("Type") == "AWS::SecretsManager::Secret"
    }
    functions = [r for r in resources.values() if r.get("Type") == "AWS::Lambda::Function"]
    keys = [
        f.get("Properties", {}).get("Environment", {}).get("Variables", {}).get("GITSTATE_RUN_KEY")
        for f in functions
    ]
    with_config = bool(params.get("ConfigText"))
    findings = []
    if not with_config:
        if secrets or any(k is not None and k != {"Ref": "AWS::NoValue"} for k in keys):
            findings.append("without ConfigText the stack still makes or passes a run key")
        return findings
    generated = [
        name
        for name, r in secrets.items()
        if r.get("Properties", {}).get("GenerateSecretString", {}).get("PasswordLength", 0) >= 32
    ]
    if len(generated) != 1:
        findings.append(f"with ConfigText, {len(generated)} generated secrets of 32+ characters, not one")
        return findings
    expected = {"Fn::Sub": "{{resolve:secretsmanager:${" + generated[0] + "}:SecretString}}"}
    if not functions or any(k != expected for k in keys):
        findings.append(f"with ConfigText, GITSTATE_RUN_KEY is {keys!r}, not {expected!r}")
    return findings


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "infra/template.yaml"
    with open(path) as f:
        template = yaml_parse(f.read())
    findings = []
    params = defaults(template)
    auth = template.get("Parameters", {}).get("AuthMode", {})
    if params.get("AuthMode", "") in ("", "server"):
        findings.append(f"the default AuthMode is {params.get('AuthMode')!r}: deploying the defaults opens the endpoint")
    modes = auth.get("AllowedValues", [])
    for mode in modes:
        params_for_mode = dict(params, AuthMode=mode)
        if mode == "team" and not params_for_mode.get("TeamTokenHashes"):
            # Deployable only with a token: the Rule must refuse the defaults.
            rules = template.get("Rules", {})
            refused = False
            for rule in rules.values():
                applies = evaluate(rule.get("RuleCondition", True), params_for_mode, template.get("Conditions", {}))
                if not applies:
                    continue
                for assertion in rule.get("Assertions", []):
                    if not evaluate(assertion["Assert"], params_for_mode, template.get("Conditions", {})):
                        refused = True
            if not refused:
                findings.append("AuthMode=team without TeamTokenHashes/TeamUsers is not refused by a Rule")
            params_for_mode["TeamTokenHashes"] = "sha256:" + "0" * 64
        resources = deployed(template, params_for_mode)
        # A flood's cost is bounded by the function's concurrency: capped unless asked otherwise.
        for name, resource in resources.items():
            if resource.get("Type") == "AWS::Lambda::Function":
                cap = resource.get("Properties", {}).get("ReservedConcurrentExecutions")
                if not str(cap).isdigit() or int(cap) <= 0:
                    findings.append(f"AuthMode={mode}: function {name} has no concurrency cap by default ({cap!r})")
        if mode != "server":
            continue
        for name, resource in resources.items():
            kind = resource.get("Type")
            props = resource.get("Properties", {})
            if kind == "AWS::Lambda::Url" and props.get("AuthType") != "AWS_IAM":
                findings.append(f"AuthMode=server: Function URL {name} has AuthType {props.get('AuthType')!r}")
            if kind == "AWS::ApiGatewayV2::Route" and props.get("AuthorizationType") != "AWS_IAM":
                findings.append(f"AuthMode=server: HTTP API route {name} has AuthorizationType {props.get('AuthorizationType')!r}")
            if kind == "AWS::ApiGatewayV2::Api" and "Target" in props:
                findings.append(f"AuthMode=server: HTTP API {name} has a quick-create route without authorization")
            if kind == "AWS::ApiGatewayV2::Api" and "Body" in props:
                # An API SAM generated from events: every operation must require AWS IAM.
                for route, operations in props["Body"].get("paths", {}).items():
                    for method, operation in operations.items():
                        security = operation.get("security") or []
                        if not any("AWS_IAM" in entry for entry in security):
                            findings.append(f"AuthMode=server: HTTP API {name} serves {method.upper()} {route} without AWS IAM")
            if kind == "AWS::Lambda::Permission" and props.get("Principal") == "*":
                findings.append(f"AuthMode=server: Lambda permission {name} grants {props.get('Action')} to everyone")
            if kind == "AWS::Serverless::Api" or kind == "AWS::ApiGateway::RestApi":
                findings.append(f"AuthMode=server: unchecked API {name} ({kind})")
    for config_text in ("", 'auth { mode = "team" }'):
        findings += run_key_findings(
            template,
            dict(params, TeamTokenHashes="sha256:" + "0" * 64, ConfigText=config_text),
        )
    if "server" not in modes:
        print("check-template-auth: AuthMode=server is not allowed at all")
    if findings:
        for finding in findings:
            print(f"check-template-auth: {path}: {finding}", file=sys.stderr)
        sys.exit(1)
    print(f"check-template-auth: {path}: no default opens the endpoint; AuthMode=server is IAM-only; team needs a token; with ConfigText every container shares one generated run key; the function's concurrency is capped")


if __name__ == "__main__":
    main()
