#!/usr/bin/env python3
"""Cold GET of one small state next to big ones (issue 17): gitstate vs the git CLI's partial clone.

Setup: lighttpd + `git http-backend` (CGI, basic auth; scripts/bench.py's helpers) serving one bare
repository whose `main` holds a 2 KiB state and N incompressible states of M MiB (default 40 × 2
MiB), with `uploadpack.allowFilter` on (as GitHub and GitLab offer it) unless --no-filter.

Each run, for each gitstate binary given:
  gitstate  a `gitstate serve` with a fresh, empty --cache-dir (a new Lambda container's /tmp);
            the first GET of the small state is timed (the server is up before the clock starts),
            then a second GET (warm); the cache directory's bytes are counted after the cold GET.
  git CLI   `git clone -q --depth 1 --filter=blob:none --no-checkout URL DIR` +
            `git -C DIR cat-file -p main:small.tfstate`, timed together; DIR's bytes counted.

Usage: scripts/bench-cold-read.py [--runs 7] [--states 40] [--state-mib 2] [--no-filter]
                                  [--gitstate BIN[=LABEL]]...
Prints a markdown table of medians (min–max) for docs/BENCHMARKS.md.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (lighttpd + git http-backend helpers)

SMALL = "small.tfstate"


def dir_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def seed(root, repos, states, state_mib, allow_filter):
    bare = os.path.join(repos, "states.git")
    bench.git("init", "--bare", "-q", "-b", "main", bare)
    bench.git("config", "http.receivepack", "true", cwd=bare)
    if allow_filter:
        bench.git("config", "uploadpack.allowFilter", "true", cwd=bare)
    work = os.path.join(root, "seed")
    bench.git("clone", "-q", bare, work)
    small = bench.state_body(1, 2048)
    with open(os.path.join(work, SMALL), "wb") as f:
        f.write(small)
    for i in range(states):
        with open(os.path.join(work, f"big-{i:02}.tfstate"), "wb") as f:
            f.write(os.urandom(state_mib * 1024 * 1024))
    bench.git("add", "-A", cwd=work)
    bench.git("-c", "user.name=bench", "-c", "user.email=b@b", "commit", "-qm", "seed", cwd=work)
    bench.git("push", "-q", "origin", "HEAD:main", cwd=work)
    shutil.rmtree(work)
    return small


def gitstate_run(binary, root, remote, run, expected):
    cache = os.path.join(root, f"cache-{os.path.basename(binary)}-{run}")
    port = bench.free_port()
    env = dict(os.environ, GIT_USERNAME=bench.USER, GIT_PASSWORD=bench.PASSWORD, RUST_LOG="warn")
    server = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}",
                               "--repository", f"default={remote}", "--cache-dir", cache],
                              env=env, cwd=root)
    try:
        bench.wait_port(port)
        client = bench.Client(port)
        start = time.perf_counter()
        body = client.request("GET", f"/state/default/{SMALL}")
        cold = (time.perf_counter() - start) * 1000
        if body != expected:
            raise SystemExit(f"{binary}: the cold GET answered {len(body)} bytes, not the state")
        size = dir_bytes(cache)
        start = time.perf_counter()
        client.request("GET", f"/state/default/{SMALL}")
        warm = (time.perf_counter() - start) * 1000
    finally:
        server.terminate()
        server.wait()
    shutil.rmtree(cache, ignore_errors=True)
    return cold, size, warm


def git_run(root, auth_remote, run, expected):
    work = os.path.join(root, f"clone-{run}")
    start = time.perf_counter()
    bench.git("clone", "-q", "--depth", "1", "--filter=blob:none", "--no-checkout", auth_remote, work)
    body = bench.git("cat-file", "-p", f"main:{SMALL}", cwd=work)
    took = (time.perf_counter() - start) * 1000
    if body != expected:
        raise SystemExit("git cat-file answered something else than the state")
    size = dir_bytes(os.path.join(work, ".git"))
    shutil.rmtree(work)
    return took, size


def med(samples):
    return statistics.median(samples), min(samples), max(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--states", type=int, default=40)
    parser.add_argument("--state-mib", type=int, default=2)
    parser.add_argument("--no-filter", action="store_true",
                        help="leave uploadpack.allowFilter off (gitstate falls back to whole trees)")
    parser.add_argument("--gitstate", action="append", default=[],
                        help="BIN or BIN=LABEL; may be repeated (default: the release build)")
    args = parser.parse_args()
    if not shutil.which("lighttpd"):
        raise SystemExit("lighttpd is missing: run scripts/install-test-deps.sh")
    binaries = args.gitstate or [os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target")),
        "release", "gitstate")]
    binaries = [(b.split("=", 1) + [os.path.basename(b)])[:2] for b in binaries]

    root = tempfile.mkdtemp(prefix="gitstate-cold-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    expected = seed(root, repos, args.states, args.state_mib, not args.no_filter)
    http_port = bench.free_port()
    lighttpd = bench.start_lighttpd(root, repos, http_port)
    remote = f"http://127.0.0.1:{http_port}/git/states.git"
    auth_remote = f"http://{bench.USER}:{bench.PASSWORD}@127.0.0.1:{http_port}/git/states.git"
    results = {label: ([], [], []) for _, label in binaries}
    cli = ([], [])
    try:
        # Interleaved, so that load on the shared machine hits every column alike.
        for run in range(args.runs):
            for binary, label in binaries:
                cold, size, warm = gitstate_run(binary, root, remote, run, expected)
                for column, value in zip(results[label], (cold, size, warm)):
                    column.append(value)
            took, size = git_run(root, auth_remote, run, expected)
            cli[0].append(took)
            cli[1].append(size)
    finally:
        lighttpd.terminate()
        lighttpd.wait()
        shutil.rmtree(root, ignore_errors=True)

    mib = 1024 * 1024
    print(f"runs: {args.runs} (medians, min–max); 1 state of 2 KiB next to {args.states} × "
          f"{args.state_mib} MiB; uploadpack.allowFilter {'off' if args.no_filter else 'on'}; "
          f"loopback lighttpd + git http-backend, basic auth; {os.cpu_count()} cores")
    print()
    print("| client | cold GET ms | on disk after it (MiB) | warm GET ms | cold ÷ git CLI |")
    print("|---|---|---|---|---|")
    c = med(cli[0])
    for _, label in binaries:
        cold, size, warm = (med(column) for column in results[label])
        print(f"| gitstate `{label}` | {cold[0]:.0f} ({cold[1]:.0f}–{cold[2]:.0f}) | "
              f"{size[0] / mib:.2f} | {warm[0]:.1f} ({warm[1]:.1f}–{warm[2]:.1f}) | {cold[0] / c[0]:.2f}× |")
    s = med(cli[1])
    print(f"| git clone --depth 1 --filter=blob:none + cat-file | {c[0]:.0f} ({c[1]:.0f}–{c[2]:.0f}) | "
          f"{s[0] / mib:.2f} | – | 1.00× |")


if __name__ == "__main__":
    sys.exit(main())
