#!/usr/bin/env python3
"""Where a warm request's time goes: CPU seconds of gitstate vs of the git server, per operation.

Starts lighttpd + `git http-backend` (as scripts/bench.py does) and `gitstate serve` on that
remote, warms the cache, then runs --runs of each operation (GET, POST of a new serial,
LOCK + UNLOCK) on one kept-alive connection and reads, from /proc, the CPU time (user + system)
gitstate used and the CPU time lighttpd's CGI children (`git http-backend`, `git upload-pack`,
`git receive-pack`, ...) used. With --perf FILE, `perf record --call-graph dwarf` samples gitstate
during the GETs (use a build with symbols: CARGO_PROFILE_RELEASE_STRIP=false
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only, into another CARGO_TARGET_DIR), to be read with
`perf report -i FILE --children --sort sym`.

Usage: scripts/bench-cpu.py [--runs 200] [--size 10240] [--gitstate PATH] [--perf FILE]
Prints a markdown table.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (lighttpd + git http-backend helpers)

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target"))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid, reaped_children=False):
    """utime + stime of `pid` (and of its reaped children: lighttpd's CGI processes)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + (cutime + cstime if reaped_children else 0)) / TICK


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=10240)
    parser.add_argument("--gitstate", default=os.path.join(TARGET, "release", "gitstate"))
    parser.add_argument("--perf", help="record a perf profile of gitstate during the GETs into this file")
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="gitstate-bench-cpu-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    bench.git("init", "--bare", "-q", "-b", "main", os.path.join(repos, "states.git"))
    bench.git("config", "http.receivepack", "true", cwd=os.path.join(repos, "states.git"))
    http_port, gs_port = bench.free_port(), bench.free_port()
    lighttpd = bench.start_lighttpd(root, repos, http_port)
    env = dict(os.environ, GIT_USERNAME=bench.USER, GIT_PASSWORD=bench.PASSWORD,
               GITSTATE_CACHE_DIR=os.path.join(root, "cache"), RUST_LOG="warn")
    server = subprocess.Popen([args.gitstate, "serve", "--listen", f"127.0.0.1:{gs_port}", "--repository",
                               f"default=http://127.0.0.1:{http_port}/git/states.git"],
                              env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        bench.wait_port(gs_port)
        client = bench.Client(gs_port)
        path = "/state/default/cpu.tfstate"
        serial = [1]
        client.request("POST", path, bench.state_body(serial[0], args.size))
        client.request("GET", path)

        def post(i):
            serial[0] += 1
            client.request("POST", path, bench.state_body(serial[0], args.size))

        def lock_unlock(i):
            body = bench.lock_body(f"cpu-{i}")
            client.request("LOCK", path, body)
            client.request("UNLOCK", path, body)

        for name, op in (("GET", lambda i: client.request("GET", path)), ("POST", post),
                         ("LOCK + UNLOCK", lock_unlock)):
            perf = None
            if args.perf and name == "GET":
                perf = subprocess.Popen(["perf", "record", "-q", "-F", "4999", "--call-graph", "dwarf,16384",
                                         "-p", str(server.pid), "-o", args.perf],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            g0, s0 = cpu_seconds(server.pid), cpu_seconds(lighttpd.pid, True)
            start = time.perf_counter()
            for i in range(args.runs):
                op(i)
            wall = time.perf_counter() - start
            g1, s1 = cpu_seconds(server.pid), cpu_seconds(lighttpd.pid, True)
            if perf:
                perf.send_signal(signal.SIGINT)
                perf.wait()
            rows.append((name, wall, g1 - g0, s1 - s0))
    finally:
        server.terminate()
        server.wait()
        lighttpd.terminate()
        lighttpd.wait()
        shutil.rmtree(root, ignore_errors=True)

    print(f"{args.runs} runs per operation; {args.size}-byte state; loopback; {os.cpu_count()} cores; "
          f"load average (1 min) {os.getloadavg()[0]:.1f}")
    print()
    print("| operation | wall ms / op | gitstate CPU ms / op | git server CPU ms / op |")
    print("|---|---|---|---|")
    for name, wall, gs, srv in rows:
        n = args.runs
        print(f"| {name} | {wall / n * 1000:.1f} | {gs / n * 1000:.2f} | {srv / n * 1000:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
