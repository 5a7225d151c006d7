"""Warm latency: gitstate over smart HTTP vs the git CLI doing the same work.

Starts lighttpd + `git http-backend` (basic auth) on loopback, a `gitstate serve` configured with
that remote, and measures, for each state size:

  GET     gitstate GET (tip unchanged)        vs  git ls-remote + git fetch --depth 1 + git show
  POST    gitstate POST (a new serial)        vs  git commit + git push
  LOCK    gitstate LOCK                       vs  git commit (lock file) + git push to a new branch
  UNLOCK  gitstate UNLOCK                     vs  git push --delete of the lock branch

Usage: scripts/bench http [--runs 30] [--sizes 10240,1048576] [--gitstate PATH]
Prints a markdown table (median, min-max, ratio gitstate/git) for docs/BENCHMARKS.md.
"""
import os
import subprocess
import tempfile
import time

from benchlib import support as s


def add_arguments(parser):
    """--runs, --sizes, --gitstate."""
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sizes", default="10240,1048576")
    s.add_gitstate_argument(parser)


def lock_unlock_samples(runs, lock, unlock):
    """Milliseconds of lock(i) and of unlock(i), alternating, `runs` times each."""
    lock_samples, unlock_samples = [], []
    for i in range(runs):
        start = time.perf_counter()
        lock(i)
        lock_samples.append(s.ms_since(start))
        start = time.perf_counter()
        unlock(i)
        unlock_samples.append(s.ms_since(start))
    return lock_samples, unlock_samples


def gitstate_samples(client, size, runs, serial):
    """GET, POST, LOCK, UNLOCK through gitstate for one state size."""
    path = f"/state/default/bench-{size}.tfstate"
    client.request("POST", path, s.state_body(serial[0], size))
    client.request("GET", path)  # warm the cache

    def post(i):
        serial[0] += 1
        client.request("POST", path, s.state_body(serial[0], size))

    results = {"GET": s.timed(lambda i: client.request("GET", path), runs), "POST": s.timed(post, runs)}
    results["LOCK"], results["UNLOCK"] = lock_unlock_samples(
        runs, lambda i: client.request("LOCK", path, s.lock_body(f"bench-{size}-{i}")),
        lambda i: client.request("UNLOCK", path, s.lock_body(f"bench-{size}-{i}")))
    return results


def git_cli_samples(root, auth_remote, size, runs, serial):
    """The same four operations with the git CLI in a depth-1 clone."""
    work = os.path.join(root, f"clone-{size}")
    s.git("clone", "-q", "--depth", "1", auth_remote, work)
    s.git("config", "user.name", "bench", cwd=work)
    s.git("config", "user.email", "bench@localhost", cwd=work)
    state_file = f"bench-{size}.tfstate"
    branch = f"refs/heads/locks/{state_file}"

    def get(i):
        s.git("ls-remote", "origin", "refs/heads/main", cwd=work)
        s.git("fetch", "-q", "--depth", "1", "origin", "main", cwd=work)
        s.git("show", f"FETCH_HEAD:{state_file}", cwd=work)

    def post(i):
        serial[0] += 1
        with open(os.path.join(work, state_file), "wb") as f:
            f.write(s.state_body(serial[0], size))
        s.git("commit", "-q", "-am", f"Update {state_file}", cwd=work)
        s.git("push", "-q", "origin", "HEAD:main", cwd=work)

    def lock(i):
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=work, input=s.lock_body(f"cli-{i}"),
                              check=True, stdout=subprocess.PIPE).stdout.decode().strip()
        tree = subprocess.run(["git", "mktree"], cwd=work, check=True, stdout=subprocess.PIPE,
                              input=f"100644 blob {blob}\t{state_file}.lock\n".encode()).stdout.decode().strip()
        commit = s.git("commit-tree", tree, "-m", "Lock", cwd=work).decode().strip()
        s.git("push", "-q", "origin", f"{commit}:{branch}", cwd=work)

    get(0)
    results = {"GET": s.timed(get, runs), "POST": s.timed(post, runs)}
    results["LOCK"], results["UNLOCK"] = lock_unlock_samples(
        runs, lock, lambda i: s.git("push", "-q", "origin", "--delete", branch, cwd=work))
    return results


def run(args):
    """Measures every size, then prints the table."""
    s.require_lighttpd()
    root = tempfile.mkdtemp(prefix="gitstate-bench-")
    rows = []
    githttp, server = s.gitstate_on_git_http(args.gitstate, root)
    try:
        remote = githttp.url("states.git")
        client = server.client()
        # The git CLI baseline works in a depth-1 clone with the credential in the URL.
        auth_remote = s.with_credentials(remote)
        for size in s.int_list(args.sizes):
            serial = [1]
            results = gitstate_samples(client, size, args.runs, serial)
            baseline = git_cli_samples(root, auth_remote, size, args.runs, serial)
            for op in ["GET", "POST", "LOCK", "UNLOCK"]:
                g, b = s.summarize(results[op]), s.summarize(baseline[op])
                rows.append((size, op, g, b, g[0] / b[0]))
    finally:
        s.shut_down(root, server, githttp)

    print(f"runs per cell: {args.runs}; loopback; lighttpd + git http-backend with basic auth; "
          f"{os.cpu_count()} cores")
    print()
    s.table_header("state size", "operation", "gitstate median (min–max) ms", "git CLI median (min–max) ms",
                   "ratio")
    for size, op, g, b, ratio in rows:
        print(f"| {size // 1024} KiB | {op} | {g[0]:.1f} ({g[1]:.1f}–{g[2]:.1f}) | "
              f"{b[0]:.1f} ({b[1]:.1f}–{b[2]:.1f}) | {ratio:.2f}× |")
