#!/usr/bin/env python3
"""Checks the README's workload-identity examples (issue 50): each YAML block of the section
"Workload identity: an OIDC token instead of a secret" parses, and says what gitstate needs:

- the Kubernetes Deployment mounts a projected service-account token for the audience `gitstate`
  with an `expirationSeconds` of at most a day, and its command puts that file's content in
  `TF_HTTP_PASSWORD`;
- the GitHub Actions workflow has `permissions: id-token: write`, asks the ID token for the
  audience `gitstate`, masks it and hands it to Terraform as `TF_HTTP_PASSWORD`;
- the GitLab CI job declares an `id_tokens` entry with `aud: gitstate` and exports it as
  `TF_HTTP_PASSWORD`.

Run by scripts/test.sh with a Python that has PyYAML (cfn-lint's environment, which
scripts/install-test-deps.sh installs):

    python3 scripts/check-readme-examples.py
"""
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "#### Workload identity: an OIDC token instead of a secret"


def blocks(text: str) -> list:
    start = text.index(SECTION)
    end = text.find("\n### ", start)
    section = text[start:end if end >= 0 else len(text)]
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]


def kubernetes(doc) -> list:
    problems = []
    spec = doc["spec"]["template"]["spec"]
    sources = [s for v in spec.get("volumes", []) for s in v.get("projected", {}).get("sources", [])]
    tokens = [s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s]
    if not tokens or tokens[0].get("audience") != "gitstate":
        problems.append("no projected serviceAccountToken with audience gitstate")
    elif not 0 < int(tokens[0].get("expirationSeconds", 0)) <= 86400:
        problems.append("the projected token's expirationSeconds is not within a day")
    command = " ".join(" ".join(c.get("command", [])) for c in spec["containers"])
    if "TF_HTTP_PASSWORD=$(cat /var/run/secrets/gitstate/token)" not in command:
        problems.append("the command does not put the token in TF_HTTP_PASSWORD")
    return problems


def github(doc) -> list:
    problems = []
    if doc.get("permissions", {}).get("id-token") != "write":
        problems.append("permissions: id-token: write is missing")
    steps = [s for job in doc["jobs"].values() for s in job["steps"]]
    script = "\n".join(s.get("run", "") for s in steps)
    for needed in ("audience=gitstate", "::add-mask::", "TF_HTTP_PASSWORD=", "$GITHUB_ENV"):
        if needed not in script:
            problems.append(f"the steps do not contain {needed}")
    return problems


def gitlab(doc) -> list:
    problems = []
    job = next(iter(doc.values()))
    tokens = job.get("id_tokens", {})
    if not any(t.get("aud") == "gitstate" for t in tokens.values()):
        problems.append("no id_tokens entry with aud: gitstate")
    names = [f'"${name}"' for name in tokens]
    script = "\n".join(job.get("script", []))
    if not any(f"TF_HTTP_PASSWORD={n}" in script for n in names):
        problems.append("the script does not export the ID token as TF_HTTP_PASSWORD")
    return problems


def main() -> int:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        docs = blocks(f.read())
    kinds = {"Deployment": kubernetes, "github": github, "gitlab": gitlab}
    seen = {}
    for doc in docs:
        if doc.get("kind") == "Deployment":
            seen["Deployment"] = kubernetes(doc)
        elif "jobs" in doc and "permissions" in doc:
            seen["github"] = github(doc)
        elif any(isinstance(v, dict) and "id_tokens" in v for v in doc.values()):
            seen["gitlab"] = gitlab(doc)
    problems = [f"{kind}: missing from the README section" for kind in kinds if kind not in seen]
    problems += [f"{kind}: {p}" for kind, found in seen.items() for p in found]
    for problem in problems:
        print(f"check-readme-examples: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-readme-examples: the {len(seen)} workload-identity examples say what gitstate needs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
