#!/usr/bin/env python3
"""Fails when docs/ARCHITECTURE.md's code map does not name a source file of a crate, or names
a symbol that is not where it says.

The code map has one section per crate, headed `### \`shared/<crate>\`` (the binaries share one:
`shared/cli` and `functions/lambda`). A file `src/a/b.rs` of a crate is named when its section
says `a/b.rs`, or says `b.rs` and names its folder `a/`; a folder's `mod.rs` is named by the
folder (`a/`); `lib.rs` and `main.rs` by the crate's heading. Every file the map names must exist
(a renamed file leaves no stale name behind).

A symbol the map names in backticks (an identifier: `RetryPolicy`, `retry_or_busy`,
`Backend::post`) must be in the file it is named beside: the nearest file named before it in the
same bullet, or the first one after it (the map writes both "`a.rs`: `Thing`" and "`Thing`
(`a.rs`)"); with no file in the bullet, in some file of the crate. A name this crate does not
hold anywhere but another crate does is a reference to that crate, and passes. All-lowercase
names match any case (`structure` is the mode `Structure`); all-capital words are not symbols
(`GET`, `LOCK`). Run by scripts/test.sh.

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


TOKEN = re.compile(r"`([^`]+)`")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$")


def misplaced_symbols(crate: str, body: str, present: list, everywhere: dict) -> list:
    """The symbols `body` names beside a file of `crate` that the file does not hold."""
    src = {p: open(os.path.join(ROOT, crate, "src", p), encoding="utf-8").read() for p in present}

    def resolve(token: str) -> set:
        if token.endswith(".rs"):
            return {p for p in present if p == token or p.endswith("/" + token)}
        if token.endswith("/"):
            return {p for p in present if ("/" + p).startswith("/" + token) or ("/" + token) in ("/" + p)}
        return set()

    def holds(name: str, texts) -> bool:
        flags = re.I if name.islower() else 0
        word = re.compile(r"\b" + re.escape(name) + r"\b", flags)
        return any(word.search(t) for t in texts)

    problems = []
    for bullet in re.split(r"\n(?=- |\n)", body):
        tokens = TOKEN.findall(bullet)
        files = [resolve(t) for t in tokens]
        for i, token in enumerate(tokens):
            if files[i] or not IDENT.match(token):
                continue
            name = token.split("::")[-1]
            if name.isupper() and "_" not in name:
                continue
            before = next((f for f in reversed(files[:i]) if f), set())
            after = next((f for f in files[i + 1:] if f), set())
            beside = before | after
            if holds(name, (src[p] for p in (beside or present))):
                continue
            if not holds(name, src.values()) and holds(name, everywhere.values()):
                continue  # another crate's name
            where = ", ".join(sorted(beside)) or "any file of it"
            problems.append(f"{crate}: the code map names `{token}` beside {where}, which does not hold it")
    return problems


def main() -> int:
    text = open(MAP, encoding="utf-8").read()
    by_crate = sections(text)
    problems = []
    everywhere = {}
    for top in CRATE_DIRS:
        for entry in sorted(os.listdir(os.path.join(ROOT, top))):
            crate = f"{top}/{entry}"
            if os.path.isdir(os.path.join(ROOT, crate, "src")):
                for rel in sources(crate):
                    with open(os.path.join(ROOT, crate, "src", rel), encoding="utf-8") as f:
                        everywhere[f"{crate}/{rel}"] = f.read()
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
            problems += misplaced_symbols(crate, body, present, everywhere)
    for problem in problems:
        print(f"check-map: {problem}", file=sys.stderr)
    if problems:
        print(f"check-map: docs/ARCHITECTURE.md has {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-map: every source file is named in docs/ARCHITECTURE.md, every symbol where it says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
