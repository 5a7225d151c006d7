#!/usr/bin/env python3
"""Fails when docs/ARCHITECTURE.md's code map does not name a source file of a crate.

The code map has one section per crate, headed `### \`shared/<crate>\`` (the binaries share one:
`shared/cli` and `functions/lambda`). A file `src/a/b.rs` of a crate is named when its section
says `a/b.rs`, or says `b.rs` and names its folder `a/`; a folder's `mod.rs` is named by the
folder (`a/`); `lib.rs` and `main.rs` by the crate's heading. Every file the map names must exist
(a renamed file leaves no stale name behind). Run by scripts/test.sh.

    python3 scripts/check-map.py
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAP = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
CRATE_DIRS = ["shared", "functions"]
HEADING = re.compile(r"^### (.*)$", re.M)
CRATE_IN_HEADING = re.compile(r"`((?:shared|functions)/[a-z_-]+)`")
NAMED_FILE = re.compile(r"`?([a-z0-9_]+(?:/[a-z0-9_]+)*\.rs)`?")
NAMED_DIR = re.compile(r"`([a-z0-9_]+(?:/[a-z0-9_]+)*)/`")


def sections(text: str) -> dict:
    """Crate directory → the text of its code-map section."""
    found = {}
    marks = list(HEADING.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[mark.start():end]
        for crate in CRATE_IN_HEADING.findall(mark.group(1)):
            found[crate] = found.get(crate, "") + body
    return found


def sources(crate: str) -> list:
    src = os.path.join(ROOT, crate, "src")
    files = []
    for folder, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                files.append(os.path.relpath(os.path.join(folder, name), src).replace(os.sep, "/"))
    return sorted(files)


def named(rel: str, body: str, files: set, dirs: set) -> bool:
    folder, _, name = rel.rpartition("/")
    if rel in ("lib.rs", "main.rs"):
        return True
    if name == "mod.rs":
        return folder in dirs or any(d.endswith("/" + folder) for d in dirs)
    if rel in files:
        return True
    if not folder:
        return name in files
    return name in files and (folder in dirs or folder.split("/")[-1] in dirs)


def main() -> int:
    text = open(MAP, encoding="utf-8").read()
    by_crate = sections(text)
    problems = []
    for top in CRATE_DIRS:
        for entry in sorted(os.listdir(os.path.join(ROOT, top))):
            crate = f"{top}/{entry}"
            if not os.path.isdir(os.path.join(ROOT, crate, "src")):
                continue
            body = by_crate.get(crate)
            if body is None:
                problems.append(f"{crate}: no section of the code map is headed with it")
                continue
            files = set(NAMED_FILE.findall(body))
            dirs = set(NAMED_DIR.findall(body))
            present = sources(crate)
            for rel in present:
                if not named(rel, body, files, dirs):
                    problems.append(f"{crate}/src/{rel}: not named in its section of the code map")
            basenames = {p.rpartition("/")[2] for p in present} | set(present)
            for name in sorted(files):
                if name not in basenames and not os.path.exists(os.path.join(ROOT, name)):
                    problems.append(f"{crate}: the code map names {name}, which is no file of it")
    for problem in problems:
        print(f"check-map: {problem}", file=sys.stderr)
    if problems:
        print(f"check-map: docs/ARCHITECTURE.md misses {len(problems)} file(s)", file=sys.stderr)
        return 1
    print("check-map: every source file is named in docs/ARCHITECTURE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
