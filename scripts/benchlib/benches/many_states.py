"""Many states in one repository (issue 34): each operation against a 10-state repository.

Setup: lighttpd + `git http-backend` (CGI, basic auth, `uploadpack.allowFilter` on, as GitHub and
GitLab offer it) serving, per configuration, two bare repositories made with `git fast-import` in
one commit each: N states of about --state-bytes (default 1 KiB) and 10 states, both in the same
layout: `folders` (`fNNN/sNNNNNN.tfstate`, --folders folders) or `flat` (one folder, named by
id, as Crossplane-style controllers name them). Every state has its own lineage, serial 1.

Per run, for each repository in turn (interleaved, so load hits both alike), a fresh `gitstate
serve` with an empty cache directory (a new Lambda container):
  cold GET        the first GET of a state (the server is up before the clock starts)
  warm GET        the same GET again
  POST            a new serial of another state (the state guard on, as by default)
  lock cycle      LOCK + POST ?ID= + UNLOCK of a third state, timed together
  cache           the cache directory's bytes after these, and their ratio to what the run
                  touched: the trees on its three paths and their files (uncompressed, at main)
  git CLI floors  what git itself takes on the same server for the objects a cold GET fetches
                  (`clone --bare --depth 1 --filter=tree:1`) and a POST pushes (`push` of a
                  commit changing one state; serial 0, below every serial the POSTs write)
Then, once per repository, pages of `GET /_/states/default` on a fresh server: its first request
(the history cache fetched), the first page (1,000), a page of 100 from the middle, a folder's
page of 100 (5 runs each, warm; time and bytes; the count checked), the cache's bytes after
them, and git's own `clone --bare --filter=blob:none` on the same server (the first request's
floor: the history without blobs; 3 runs, time and bytes on disk); and for the big one
a reconcile loop: one process reading --reconcile different states in turn (first and last 10 %
of the reads, packs and bytes in the cache at the end).

Usage: scripts/bench many-states [--states 50000] [--layouts folders,flat] [--folders 100]
                                 [--runs 15] [--reconcile 2000] [--gitstate BIN]
Prints one markdown table per configuration: medians (min–max) and the ratio to 10 states.
"""
import http.client
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

from benchlib import support as s


def add_arguments(parser):
    """--states, --layouts, --folders, --state-bytes, --runs, --reconcile, --gitstate."""
    parser.add_argument("--states", type=s.int_list, default=[50000],
                        help="states in the big repository; a comma-separated list runs each")
    parser.add_argument("--layouts", default="folders,flat",
                        help="comma-separated: folders (--folders folders) and/or flat (one folder)")
    parser.add_argument("--folders", type=int, default=100)
    parser.add_argument("--state-bytes", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--reconcile", type=int, default=2000,
                        help="different states one process reads in turn (0: skip)")
    s.add_gitstate_argument(parser)


def state_path(i, layout, folders):
    """The path of state `i` in `layout`."""
    if layout == "flat":
        return f"s{i:06}.tfstate"
    return f"f{i % folders:03}/s{i:06}.tfstate"


def state(i, serial, size):
    """State `i`'s body at `serial`: its own lineage, padded to about `size` bytes."""
    pad = "x" * max(0, size - 140)
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": f"bench-{i:06}", "outputs": {}, "resources": [],
                       "pad": pad}).encode()


def seed(path, count, layout, folders, size):
    """A bare repository whose `main` holds `count` states in one commit (git fast-import)."""
    s.init_bare(path, allow_filter=True)
    s.fast_import(path, ((state_path(i, layout, folders), state(i, 1, size)) for i in range(count)))


def packs(cache):
    """Pack files under a cache directory."""
    return sum(1 for _, _, files in os.walk(cache) for f in files if f.endswith(".pack"))


def one_run(binary, root, remote, count, layout, folders, size, run, rng):
    """(cold GET, warm GET, POST, lock cycle) ms and the cache's bytes, on a fresh server."""
    cache = os.path.join(root, f"cache-{run}-{count}")
    server = s.Gitstate(binary, ["--repository", f"default={remote}", "--cache-dir", cache],
                        s.git_credentials_env("warn"), root, log="gitstate.log")
    try:
        client = server.client()
        read, written, locked = rng.sample(range(count), 3)
        url = lambda i: f"/state/default/{state_path(i, layout, folders)}"  # noqa: E731
        cold, body = client.timed("GET", url(read))
        if json.loads(body).get("lineage") != f"bench-{read:06}":
            raise SystemExit(f"the cold GET of state {read} answered something else")
        warm, _ = client.timed("GET", url(read))
        # Serials grow run by run: a state written in an earlier run is at most at run + 1.
        post, _ = client.timed("POST", url(written), state(written, run + 2, size))
        lock_id = f"bench-{run}"
        lock_url = url(locked)
        cycle = 0.0
        took, _ = client.timed("LOCK", lock_url, s.lock_body(lock_id))
        cycle += took
        took, _ = client.timed("POST", f"{url(locked)}?ID={lock_id}", state(locked, run + 2, size))
        cycle += took
        took, _ = client.timed("UNLOCK", lock_url, s.lock_body(lock_id))
        cycle += took
        paths = [state_path(i, layout, folders) for i in (read, written, locked)]
        return (cold, warm, post, cycle), s.dir_bytes(cache), paths
    finally:
        server.stop()
        shutil.rmtree(cache, ignore_errors=True)


def touched_bytes(bare, paths):
    """Bytes of the objects a run touched, as git stores them uncompressed: the trees on
    `paths` and their files, at `main`."""
    names = {"main:"}
    for path in paths:
        parts = path.split("/")
        names.update("main:" + "/".join(parts[:k]) for k in range(1, len(parts) + 1))
    out = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=bare,
                         input="\n".join(sorted(names)).encode() + b"\n", check=True,
                         stdout=subprocess.PIPE).stdout.decode()
    return sum(int(line) for line in out.split() if line.isdigit())


def git_floor(root, remote, path, body, run):
    """(ms, ms) the git CLI takes on the same server for what bounds a cold GET and a POST: a
    clone of the tip's commit and root tree (`--depth 1 --filter=tree:1`), and the push of a
    commit that changes the one file at `path` (made in a `blob:none` clone, not timed)."""
    url = s.with_credentials(remote)
    clone = os.path.join(root, f"floor-{run}")
    start = time.perf_counter()
    s.git("clone", "--bare", "-q", "--depth", "1", "--filter=tree:1", "--no-tags", url, clone)
    cold = s.ms_since(start)
    shutil.rmtree(clone)
    s.git("clone", "--bare", "-q", "--depth", "1", "--filter=blob:none", "--no-tags", url, clone)
    env = dict(os.environ, GIT_INDEX_FILE=os.path.join(root, f"floor-{run}.index"),
               GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@b",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="b@b")
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=body, cwd=clone,
                          check=True, stdout=subprocess.PIPE).stdout.decode().strip()
    s.git("read-tree", "main", cwd=clone, env=env)
    s.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", cwd=clone, env=env)
    tree = s.git("write-tree", "--missing-ok", cwd=clone, env=env).decode().strip()
    commit = s.git("commit-tree", tree, "-p", "main", "-m", "floor", cwd=clone,
                   env=env).decode().strip()
    start = time.perf_counter()
    s.git("push", "-q", url, f"{commit}:refs/heads/main", cwd=clone)
    push = s.ms_since(start)
    shutil.rmtree(clone)
    os.remove(env["GIT_INDEX_FILE"])
    return cold, push


def listing(binary, root, remote, count, layout, folders):
    """{label: (ms samples, bytes of the last answer)} of `/_/states/default` pages on a server
    that has read nothing yet: its first request (the history cache fetched), then warm: the
    first page (1,000), a page of 100 from the middle, a folder's (or a name prefix's) page of
    100. Each answer's `X-Total-Count` is checked."""
    cache = os.path.join(root, "cache-listing")
    server = s.Gitstate(binary, ["--repository", f"default={remote}", "--cache-dir", cache],
                        s.git_credentials_env("warn"), root, log="gitstate.log")
    middle = state_path(count // 2, layout, folders)
    prefix = (state_path(count // 2, layout, folders).split("/")[0] + "/" if layout == "folders"
              else middle[:4])
    pages = [
        ("first request (history cache fetched)", "/_/states/default", 1, count),
        ("first page (1,000)", "/_/states/default", 5, count),
        ("a page of 100 after the middle", f"/_/states/default?after={middle}&limit=100", 5,
         count),
        (f"`prefix={prefix}`, 100", f"/_/states/default?prefix={prefix}&limit=100", 5, None),
    ]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        results = {}
        for label, url, runs, total in pages:
            samples, size = [], 0
            for _ in range(runs):
                start = time.perf_counter()
                conn.request("GET", url)
                response = conn.getresponse()
                body = response.read()
                samples.append(s.ms_since(start))
                if response.status != 200:
                    raise SystemExit(f"{url}: {response.status} {body[:200]!r}")
                counted = int(response.getheader("X-Total-Count", "-1"))
                if total is not None and counted != total:
                    raise SystemExit(f"{url}: X-Total-Count {counted}, expected {total}")
                size = len(body)
            results[label] = (samples, size)
        cached = s.dir_bytes(cache)
        results["listing: cache on disk after the pages (MiB; bytes)"] = (
            [cached / (1024 * 1024)], cached)
    finally:
        server.stop()
        shutil.rmtree(cache, ignore_errors=True)
    # The floor of the first request: git's own clone of the history without blobs (3 runs).
    samples, size = [], 0
    for run in range(3):
        clone = os.path.join(root, f"floor-listing-{run}")
        start = time.perf_counter()
        s.git("clone", "--bare", "-q", "--filter=blob:none", "--no-tags",
              s.with_credentials(remote), clone)
        samples.append(s.ms_since(start))
        size = s.dir_bytes(clone)
        shutil.rmtree(clone)
    results["git CLI: `clone --filter=blob:none` (floor of the first request; bytes on disk)"] = (
        samples, size)
    return results


def reconcile(binary, root, remote, count, reads, layout, folders, rng):
    """(ms of each read, packs, cache bytes) of one process reading `reads` different states."""
    cache = os.path.join(root, "cache-reconcile")
    server = s.Gitstate(binary, ["--repository", f"default={remote}", "--cache-dir", cache],
                        s.git_credentials_env("warn"), root, log="gitstate.log")
    try:
        client = server.client()
        samples = []
        for i in rng.sample(range(count), min(reads, count)):
            took, _ = client.timed("GET", f"/state/default/{state_path(i, layout, folders)}")
            samples.append(took)
        return samples, packs(cache), s.dir_bytes(cache)
    finally:
        server.stop()
        shutil.rmtree(cache, ignore_errors=True)


def configuration(binary, root, githttp, count, layout, args):
    """Seeds both repositories of one configuration, measures them, prints its table."""
    rng = random.Random(count)
    names, bares, touched = {}, {}, {10: [], count: []}
    for n in (10, count):
        name = f"{layout}-{n}.git"
        s.log(f"many-states: seeding {n} states ({layout})")
        bares[n] = os.path.join(githttp.repos, name)
        seed(bares[n], n, layout, args.folders, args.state_bytes)
        names[n] = githttp.url(name)
    ops = {n: ([], [], [], [], [], [], []) for n in names}
    for run in range(args.runs):
        for n, remote in names.items():
            timings, size, paths = one_run(binary, root, remote, n, layout, args.folders,
                                           args.state_bytes, run, rng)
            touched[n].append(size / touched_bytes(bares[n], paths))
            written = rng.randrange(n)
            floor = git_floor(root, remote, state_path(written, layout, args.folders),
                              state(written, 0, args.state_bytes), run)
            for column, value in zip(ops[n], (*timings, size, *floor)):
                column.append(value)
        s.log(f"many-states: {layout} {count}: run {run + 1}/{args.runs}")
    lists = {n: listing(binary, root, remote, n, layout, args.folders)
             for n, remote in names.items()}

    print(f"### {count} states, layout {layout}" + (f" ({args.folders} folders)" if layout == "folders" else ""))
    print()
    print(f"{args.runs} runs, fresh server and cache each; states of about {args.state_bytes} "
          f"bytes; loopback lighttpd + git http-backend, allowFilter on; {os.cpu_count()} cores")
    print()
    s.table_header("operation", "10 states ms", f"{count} states ms", "ratio")
    for k, label in enumerate(("cold GET", "warm GET", "POST", "LOCK + POST ?ID= + UNLOCK")):
        small, big = s.summarize(ops[10][k]), s.summarize(ops[count][k])
        s.table_row(label, s.cell(ops[10][k]), s.cell(ops[count][k]), f"{big[0] / small[0]:.2f}×")
    for k, label in ((5, "git CLI: `clone --depth 1 --filter=tree:1` (floor of a cold GET)"),
                     (6, "git CLI: `push` of one changed state (floor of a POST)")):
        small, big = s.summarize(ops[10][k]), s.summarize(ops[count][k])
        s.table_row(label, s.cell(ops[10][k]), s.cell(ops[count][k]), f"{big[0] / small[0]:.2f}×")
    s.table_row("cache ÷ the trees and files on the run's paths (uncompressed)",
                s.cell(touched[10], ".2f"), s.cell(touched[count], ".2f"), "–")
    mib = 1024 * 1024
    small, big = s.summarize(ops[10][4]), s.summarize(ops[count][4])
    s.table_row("cache on disk after them (MiB)", f"{small[0] / mib:.2f}", f"{big[0] / mib:.2f}",
                f"{big[0] / small[0]:.2f}×")
    for (label, (small_ms, small_bytes)), (big_ms, big_bytes) in zip(lists[10].items(),
                                                                      lists[count].values()):
        plain = label.startswith(("git CLI", "listing:"))
        fmt = ".2f" if label.startswith("listing:") else ".1f"
        s.table_row(label if plain else f"`GET /_/states`: {label} (bytes)",
                    f"{s.cell(small_ms, fmt)} ({small_bytes:,})",
                    f"{s.cell(big_ms, fmt)} ({big_bytes:,})",
                    f"{s.summarize(big_ms)[0] / s.summarize(small_ms)[0]:.2f}×")
    print()
    if args.reconcile:
        samples, pack_count, size = reconcile(binary, root, names[count], count, args.reconcile,
                                              layout, args.folders, rng)
        tenth = max(1, len(samples) // 10)
        print(f"Reconcile: one process reads {len(samples)} different states of {count} in turn: "
              f"first 10 % {s.cell(samples[:tenth])} ms, last 10 % {s.cell(samples[-tenth:])} ms, "
              f"all {s.cell(samples)} ms; {pack_count} pack(s), {size / mib:.1f} MiB in the cache.")
        print()


def run(args):
    """Every configuration (states × layouts), one lighttpd for all."""
    s.require_lighttpd()
    binary = args.gitstate or s.default_gitstate()
    root = tempfile.mkdtemp(prefix="gitstate-many-")
    githttp = None
    try:
        githttp = s.GitHttp(root)
        for count in args.states:
            for layout in [l for l in args.layouts.split(",") if l]:
                if layout not in ("folders", "flat"):
                    raise SystemExit(f"unknown layout {layout}: folders or flat")
                configuration(binary, root, githttp, count, layout, args)
    finally:
        if githttp:
            githttp.stop()
        shutil.rmtree(root, ignore_errors=True)
