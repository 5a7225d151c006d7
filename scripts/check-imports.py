#!/usr/bin/env python3
"""Fails when two modules of a crate import each other, directly or around a longer circle.

The crates' modules are read as text: every `crate::a::b` and `super::x` path outside comments
and test modules is an arrow from the file's module to the longest module that path names. A
module and its own descendants may use each other (a parent declares and re-exports its
children); any other circle is refused (ARCHITECTURE.md, "Invariants"). Run by scripts/test.sh.

    python3 scripts/check-imports.py            # every crate under shared/ and functions/
"""
import os
import re
import sys

CRATE_PATH = re.compile(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")
SUPER_PATH = re.compile(r"\bsuper::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")


def module_of(src: str, path: str) -> tuple:
    parts = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def code_of(text: str) -> str:
    """The file without its test module and without comment lines."""
    text = text.split("#[cfg(test)]")[0]
    return "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))


def longest_module(modules, base: tuple, segments: list):
    for k in range(len(segments), 0, -1):
        candidate = base + tuple(segments[:k])
        if candidate in modules:
            return candidate
    return base


def arrows(src: str) -> dict:
    modules = {}
    for root, _, files in os.walk(src):
        for name in files:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    modules[module_of(src, path)] = code_of(f.read())
    graph = {}
    for module, code in modules.items():
        targets = set()
        for p in CRATE_PATH.findall(code):
            targets.add(longest_module(modules, (), p.split("::")))
        for p in SUPER_PATH.findall(code):
            targets.add(longest_module(modules, module[:-1], p.split("::")))
        nested = lambda a, b: a[: len(b)] == b or b[: len(a)] == a
        graph[module] = sorted(t for t in targets if t in modules and not nested(module, t))
    return graph


def circles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main() -> int:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    failed = 0
    for group in ("shared", "functions"):
        for crate in sorted(os.listdir(os.path.join(root, group))):
            src = os.path.join(root, group, crate, "src")
            if not os.path.isdir(src):
                continue
            for circle in circles(arrows(src)):
                names = ", ".join("::".join(m) or "(crate root)" for m in circle)
                print(f"check-imports: {group}/{crate}: these modules import each other: {names}")
                failed += 1
    if failed:
        return 1
    print("check-imports: no import circle between modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
