#!/usr/bin/env python3
"""Checks the README's workload-identity examples (issue 50): each YAML block of the section
"Workload identity: an OIDC token instead of a secret" parses, and says what gitstate needs:

- the Kubernetes Deployment mounts a projected service-account token for the audience `gitstate`
  with an `expirationSeconds` of at most a day, and its command puts that file's content in
  `TF_HTTP_PASSWORD`;
- the GitHub Actions workflow has `permissions: id-token: write`, asks the ID token for the
  audience `gitstate`, masks it and hands it to Terraform as `TF_HTTP_PASSWORD`;
- the GitLab CI job declares an `id_tokens` entry with `aud: gitstate` and exports it as
  `TF_HTTP_PASSWORD`;
- the HCL of each shared issuer (GitHub's, GitLab.com's) is there, and each of its rules pins
  an owner by id, exactly (`repository_owner_id` or `repository_id`; `namespace_id` or
  `project_id`: a name can be registered again by someone else), and a GitLab rule on `ref`
  says `ref_type` (a tag may have a branch's name).

That each rule of the section also passes gitstate's own start-up check is the Rust test
`gitstate-app oidc::tests::the_readme_examples_start` (the same HCL, through the same code).

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


# The issuers that sign tokens for anyone, and the claims that pin an owner by id (the table of
# shared/app/src/oidc/rules.rs, SHARED_ISSUERS).
SHARED = {
    "https://token.actions.githubusercontent.com": ("repository_owner_id", "repository_id"),
    "https://gitlab.com": ("namespace_id", "project_id"),
}


def section_of(text: str) -> str:
    start = text.index(SECTION)
    end = text.find("\n### ", start)
    return text[start:end if end >= 0 else len(text)]


def blocks(section: str) -> list:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]


def shared_rules(section: str) -> list:
    """Each shared issuer's HCL example is there, and each of its rules pins an owner's id."""
    problems = []
    seen = set()
    for block in re.findall(r"```hcl\n(.*?)```", section, re.S):
        for oidc in re.split(r"\boidc\s*\{", block)[1:]:
            issuer = re.search(r'issuer\s*=\s*"([^"]*)"', oidc)
            if not issuer or issuer.group(1) not in SHARED:
                continue
            issuer = issuer.group(1)
            seen.add(issuer)
            ids = SHARED[issuer]
            rules = re.split(r"\brule\s*\{", oidc)[1:]
            if not rules:
                problems.append(f"{issuer}: the example has no rule")
            for n, rule in enumerate(rules, 1):
                pinned = any(re.search(rf'\b{c}\s*=\s*"[^"*]+"', rule) for c in ids)
                if not pinned:
                    problems.append(f"{issuer}: rule {n} pins no {' or '.join(ids)} exactly")
                if re.search(r'\bref\s*=', rule) and issuer == "https://gitlab.com" and not re.search(r'\bref_type\s*=\s*"branch"', rule):
                    problems.append(f"{issuer}: rule {n} matches ref without ref_type = \"branch\" (a tag may be named main)")
    problems += [f"{issuer}: no HCL example" for issuer in SHARED if issuer not in seen]
    return problems


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
        section = section_of(f.read())
    docs = blocks(section)
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
    problems += [f"hcl: {p}" for p in shared_rules(section)]
    for problem in problems:
        print(f"check-readme-examples: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-readme-examples: the {len(seen)} workload-identity examples say what gitstate needs, and the rules of the {len(SHARED)} shared issuers pin an owner's id")
    return 0


if __name__ == "__main__":
    sys.exit(main())
