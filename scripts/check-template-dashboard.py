#!/usr/bin/env python3
"""Checks the dashboards: the SAM template's CloudWatch dashboard body, with the !Sub variables
filled in, is JSON with widgets whose metrics name a namespace the function writes or
AWS/Lambda; and every gitstate series the template, that body and infra/grafana-dashboard.json
name is one the code defines (shared/core/src/metrics.rs, shared/wire/src/metrics.rs). Run by
scripts/lint-infra.sh with the SAM CLI's Python (for its YAML loader).

Usage: check-template-dashboard.py TEMPLATE
"""
import json
import re
import sys

from samcli.yamlhelper import yaml_parse


def main(path):
    with open(path) as f:
        template = yaml_parse(f.read())
    body, variables = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    names = {"AWS::Region": "us-east-1", **{k: "function-name" for k in variables}}
    filled = re.sub(r"\$\{([^}]+)\}", lambda m: names[m.group(1)], body)
    widgets = json.loads(filled)["widgets"]
    assert widgets, "the dashboard has no widgets"
    for widget in widgets:
        for line in widget["properties"]["metrics"]:
            first = line[0]
            if isinstance(first, dict):
                assert "SEARCH('{gitstate," in first["expression"], first
            else:
                assert first in ("AWS/Lambda", "gitstate", ".", "..."), line
    defined = set()
    for names in ("shared/core/src/metrics.rs", "shared/wire/src/metrics.rs"):
        defined |= set(re.findall(r'"(gitstate_[a-z_]+)"', open(names).read()))
    with open("infra/grafana-dashboard.json") as f:
        grafana = f.read()
    json.loads(grafana)
    for where, text in [(path, open(path).read()), ("infra/grafana-dashboard.json", grafana)]:
        for name in set(re.findall(r"gitstate_[a-z_]+", text)):
            series = re.sub(r"_(bucket|sum|count)$", "", name)
            assert series in defined, f"{where} names {name}, which no code records"
    print(f"check-template-dashboard: {path}: {len(widgets)} widgets, valid JSON; the Grafana "
          f"dashboard and the alarms name only defined series")


if __name__ == "__main__":
    main(sys.argv[1])
