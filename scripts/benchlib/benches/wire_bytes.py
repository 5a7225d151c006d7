"""Bytes on the wire per operation, gitstate against the git CLI doing the same work (issue 48).

Setup: lighttpd + `git http-backend` (CGI, basic auth; benchlib.support's helpers), for each
layout of --layouts two copies of one repository of --states states of about --state-bytes
bytes (`scripts/bench many-states`' `seed`: one commit, `fNNN/sNNNNNN.tfstate` in --folders
folders, or `sNNNNNN.tfstate` in one flat folder; serial 1, lineage `bench-NNNNNN`), partial
fetch on (`uploadpack.allowFilter true`, as GitHub and GitLab offer it). gitstate works on one
copy, the git CLI on the other, each through its own scripts/latency-proxy.py (no delay, no rate
limit), which counts the bytes it forwards: up (to the git server) and down. Its counters are
read before and after each operation, after nothing has moved for --settle seconds (what a
process sends after its answer, e.g. a background push, counts with the operation).

State A is the one in the middle, state B the next one (another folder in the folders layout).
Operations, in this order, on each side:

  cold GET      gitstate: a fresh `gitstate serve` (empty --cache-dir; its start counted) GETs A.
                git CLI: `git clone --bare --depth 1 --filter=blob:none --no-tags` then
                `git cat-file -p main:A` (which fetches A's blob lazily): the sum.
  POST          gitstate: POST of A at serial 2 (same lineage: the state guard admits it).
                git CLI: in that clone, a commit changing A made with plumbing (hash-object,
                read-tree, update-index, write-tree, commit-tree; no network), then
                `git push origin C:refs/heads/main`.
  LOCK + UNLOCK gitstate: LOCK then UNLOCK of A (a LockInfo body). git CLI: push of a root
                commit holding `A.lock` as the new branch `locks/A`, then `git push origin
                :refs/heads/locks/A`.
  GET after another writer's push (B), and (A): another writer (the git CLI, its own clone,
                straight to lighttpd, not counted) pushes a change to B (then, for the second
                row, to A at serial 3); then gitstate GETs A (the answer's serial checked).
                git CLI: `git fetch --depth 1 --filter=blob:none origin main` in its clone,
                then `git cat-file -p FETCH_HEAD:A` (A's blob fetched lazily when it changed).

Usage: scripts/bench wire-bytes [--states 50000] [--layouts folders,flat] [--folders 100]
                                [--state-bytes 1024] [--settle 1.5] [--gitstate PATH]
Prints one markdown table: bytes per operation and layout (KB = 1,000 bytes), up + down and
each, gitstate ÷ git CLI.
"""
import json
import os
import shutil
import subprocess
import tempfile

from benchlib import support as s
from benchlib.benches import many_states

OPERATIONS = ("cold GET", "POST", "LOCK + UNLOCK", "GET after another writer's push (B)",
              "GET after another writer's push (A)")
# git -c options for every git CLI command: nothing in the background, nothing but the work.
QUIET = ("-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "fetch.writeCommitGraph=false",
         "-c", "user.name=bench", "-c", "user.email=b@b")


def add_arguments(parser):
    """--states, --layouts, --folders, --state-bytes, --settle, --gitstate."""
    parser.add_argument("--states", type=int, default=50000)
    parser.add_argument("--layouts", default="folders,flat",
                        help="comma-separated: folders (--folders folders) and/or flat (one folder)")
    parser.add_argument("--folders", type=int, default=100)
    parser.add_argument("--state-bytes", type=int, default=1024)
    parser.add_argument("--settle", type=float, default=1.5,
                        help="seconds without traffic before the proxy's counters are read")
    s.add_gitstate_argument(parser)


def git(repo, *args, input=None):
    """git in `repo` (QUIET options); its stdout, stripped."""
    return subprocess.run(["git", *QUIET, *args], cwd=repo, input=input, check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.strip()


class OtherWriter:
    """Another writer: the git CLI in a blobless depth-1 clone of `url`, straight to lighttpd."""

    def __init__(self, root, url, name):
        self.clone = os.path.join(root, name)
        s.git("clone", "-q", "--bare", "--depth", "1", "--filter=blob:none", "--no-tags",
              s.with_credentials(url), self.clone)

    def push(self, path, body):
        """Commits `path` = `body` on the remote's current main and pushes it."""
        git(self.clone, "fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", "main")
        commit = s.commit_file(self.clone, git(self.clone, "rev-parse", "FETCH_HEAD").decode(), path, body,
                             f"Update {path} by another writer")
        git(self.clone, "push", "-q", "origin", f"{commit}:refs/heads/main")


def measured(proxy, settle, fn):
    """((up, down), fn()) with up and down the bytes `fn` moved through `proxy`."""
    before = proxy.totals(settle)
    value = fn()
    after = proxy.totals(settle)
    return (after[0] - before[0], after[1] - before[1]), value


def check_state(body, index, serial, who):
    """Ends the benchmark unless `body` is state `index` at `serial`."""
    got = json.loads(body)
    if got.get("lineage") != f"bench-{index:06}" or got.get("serial") != serial:
        raise SystemExit(f"{who}: read lineage {got.get('lineage')} serial {got.get('serial')}, "
                         f"expected bench-{index:06} serial {serial}")


def gitstate_side(args, root, githttp, name, a, b, layout):
    """The five operations through gitstate; [(up, down)] in OPERATIONS' order."""
    path = lambda i: many_states.state_path(i, layout, args.folders)  # noqa: E731
    body = lambda i, serial: many_states.state(i, serial, args.state_bytes)  # noqa: E731
    url = f"/state/default/{path(a)}"
    proxy = s.LatencyProxy(root, githttp.port, name=f"proxy-gitstate-{layout}")
    other = OtherWriter(root, githttp.url(name), f"other-{name}")
    cache = os.path.join(root, f"cache-{layout}")
    server = None
    rows = []
    try:
        holder = {}

        def start_and_get():
            holder["server"] = s.Gitstate(args.gitstate, ["--repository", f"default={proxy.url('/git/' + name)}",
                                                          "--cache-dir", cache],
                                          s.git_credentials_env("warn"), root, log="gitstate.log")
            holder["client"] = holder["server"].client()
            return holder["client"].request("GET", url)
        counted, got = measured(proxy, args.settle, start_and_get)
        server, client = holder["server"], holder["client"]
        check_state(got, a, 1, "gitstate cold GET")
        rows.append(counted)
        counted, _ = measured(proxy, args.settle, lambda: client.request("POST", url, body(a, 2)))
        rows.append(counted)

        def lock_cycle():
            client.request("LOCK", url, s.lock_body("wire-bytes"))
            client.request("UNLOCK", url, s.lock_body("wire-bytes"))
        counted, _ = measured(proxy, args.settle, lock_cycle)
        rows.append(counted)
        for pushed, serial in ((b, 2), (a, 3)):
            other.push(path(pushed), body(pushed, serial))
            counted, got = measured(proxy, args.settle, lambda: client.request("GET", url))
            check_state(got, a, 3 if pushed == a else 2, f"gitstate GET after a push to state {pushed}")
            rows.append(counted)
    finally:
        if server is not None:
            server.stop()
        proxy.stop()
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(other.clone, ignore_errors=True)
    return rows


def git_side(args, root, githttp, name, a, b, layout):
    """The same five operations with the git CLI; [(up, down)] in OPERATIONS' order."""
    path = lambda i: many_states.state_path(i, layout, args.folders)  # noqa: E731
    body = lambda i, serial: many_states.state(i, serial, args.state_bytes)  # noqa: E731
    proxy = s.LatencyProxy(root, githttp.port, name=f"proxy-git-{layout}")
    other = OtherWriter(root, githttp.url(name), f"other-{name}")
    clone = os.path.join(root, f"cli-{name}")
    rows = []
    try:
        def cold_get():
            s.git("clone", "-q", "--bare", "--depth", "1", "--filter=blob:none", "--no-tags",
                  s.with_credentials(proxy.url("/git/" + name)), clone)
            return git(clone, "cat-file", "-p", f"main:{path(a)}")
        counted, got = measured(proxy, args.settle, cold_get)
        check_state(got, a, 1, "git CLI cold GET")
        rows.append(counted)

        commit = s.commit_file(clone, "main", path(a), body(a, 2), f"Update {path(a)} (serial 2) by bench")
        counted, _ = measured(proxy, args.settle,
                              lambda: git(clone, "push", "-q", "origin", f"{commit}:refs/heads/main"))
        git(clone, "update-ref", "refs/heads/main", commit)
        rows.append(counted)

        lock = s.commit_file(clone, None, path(a) + ".lock", s.lock_body("wire-bytes"), f"Lock {path(a)}")

        def lock_cycle():
            git(clone, "push", "-q", "origin", f"{lock}:refs/heads/locks/{path(a)}")
            git(clone, "push", "-q", "origin", f":refs/heads/locks/{path(a)}")
        counted, _ = measured(proxy, args.settle, lock_cycle)
        rows.append(counted)
        for pushed, serial in ((b, 2), (a, 3)):
            other.push(path(pushed), body(pushed, serial))

            def fetch_and_read():
                git(clone, "fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", "main")
                return git(clone, "cat-file", "-p", f"FETCH_HEAD:{path(a)}")
            counted, got = measured(proxy, args.settle, fetch_and_read)
            check_state(got, a, 3 if pushed == a else 2, f"git CLI read after a push to state {pushed}")
            git(clone, "update-ref", "refs/heads/main", "FETCH_HEAD")
            rows.append(counted)
    finally:
        proxy.stop()
        shutil.rmtree(clone, ignore_errors=True)
        shutil.rmtree(other.clone, ignore_errors=True)
    return rows


def run(args):
    """Seeds each layout's two copies, runs both sides, prints the table."""
    s.require_lighttpd()
    layouts = [layout for layout in args.layouts.split(",") if layout]
    for layout in layouts:
        if layout not in ("folders", "flat"):
            raise SystemExit(f"unknown layout {layout}: folders or flat")
    if args.states < 2:
        raise SystemExit("--states: at least 2")
    a = args.states // 2
    b = a + 1 if a + 1 < args.states else a - 1
    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="gitstate-bench-wire-")
    githttp = None
    results = {}
    try:
        githttp = s.GitHttp(root)
        for layout in layouts:
            s.log(f"wire-bytes: seeding {args.states} states ({layout})")
            seeded = os.path.join(githttp.repos, f"{layout}-gitstate.git")
            many_states.seed(seeded, args.states, layout, args.folders, args.state_bytes)
            shutil.copytree(seeded, os.path.join(githttp.repos, f"{layout}-git.git"), symlinks=True)
            s.log(f"wire-bytes: gitstate, {layout}")
            mine = gitstate_side(args, root, githttp, f"{layout}-gitstate.git", a, b, layout)
            s.log(f"wire-bytes: git CLI, {layout}")
            theirs = git_side(args, root, githttp, f"{layout}-git.git", a, b, layout)
            results[layout] = list(zip(mine, theirs))
            for op, ((gu, gd), (cu, cd)) in zip(OPERATIONS, results[layout]):
                s.log(f"  {op}: gitstate {gu} up {gd} down; git CLI {cu} up {cd} down")
    finally:
        if githttp:
            githttp.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(f"### Bytes on the wire per operation: {args.states:,} states of about {args.state_bytes} bytes")
    print()
    print(f"gitstate {args.gitstate}; lighttpd + git http-backend (allowFilter on), counted at a proxy in front "
          f"of it (HTTP requests and answers, headers included; up = to the git server); state A "
          f"`{many_states.state_path(a, 'folders', args.folders)}` (folders) / "
          f"`{many_states.state_path(a, 'flat', args.folders)}` (flat), B the next; {os.cpu_count()} cores; "
          f"load average (1 min) {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print()
    s.table_header("operation", "layout", "gitstate bytes", "gitstate up / down", "git CLI bytes",
                   "git CLI up / down", "gitstate ÷ git")
    for k, op in enumerate(OPERATIONS):
        for layout in layouts:
            (gu, gd), (cu, cd) = results[layout][k]
            s.table_row(op, layout if layout == "flat" else f"{args.folders} folders",
                        s.byte_size(gu + gd), f"{s.byte_size(gu)} / {s.byte_size(gd)}",
                        s.byte_size(cu + cd), f"{s.byte_size(cu)} / {s.byte_size(cd)}",
                        f"{(gu + gd) / max(1, cu + cd):.2f}×")
    print()
    print("git CLI per row: cold GET = `clone --bare --depth 1 --filter=blob:none --no-tags` + "
          "`cat-file -p main:A` (lazy blob fetch); POST = `push origin C:refs/heads/main` (C made with "
          "plumbing, no network); LOCK + UNLOCK = `push origin L:refs/heads/locks/A` (a root commit holding "
          "`A.lock`) + `push origin :refs/heads/locks/A`; GET after a push = `fetch --depth 1 "
          "--filter=blob:none origin main` + `cat-file -p FETCH_HEAD:A`.")
