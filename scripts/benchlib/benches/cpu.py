"""Where a warm request's time goes: CPU seconds of gitstate vs of the git server, per operation.

Starts lighttpd + `git http-backend` (as `scripts/bench http` does) and `gitstate serve` on that
remote, warms the cache, then runs --runs of each operation (GET, POST of a new serial,
LOCK + UNLOCK) on one kept-alive connection and reads, from /proc, the CPU time (user + system)
gitstate used and the CPU time lighttpd's CGI children (`git http-backend`, `git upload-pack`,
`git receive-pack`, ...) used. With --perf FILE, `perf record --call-graph dwarf` samples gitstate
during one operation's runs (--perf-op, GET unless told; use a build with symbols: CARGO_PROFILE_RELEASE_STRIP=false
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only, into another CARGO_TARGET_DIR), to be read with
`perf report -i FILE --children --sort sym`.

Usage: scripts/bench cpu [--runs 200] [--size 10240] [--gitstate PATH] [--perf FILE] [--perf-op POST]
Prints a markdown table.
"""
import os
import signal
import subprocess
import tempfile
import time

from benchlib import support as s

TICK = os.sysconf("SC_CLK_TCK")


def add_arguments(parser):
    """--runs, --size, --gitstate, --perf, --perf-op."""
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=10240)
    s.add_gitstate_argument(parser)
    parser.add_argument("--perf", help="record a perf profile of gitstate during one operation's runs into this file")
    parser.add_argument("--perf-op", default="GET", choices=["GET", "POST", "LOCK + UNLOCK"],
                        help="the operation --perf samples (GET unless told)")


def cpu_seconds(pid, reaped_children=False):
    """utime + stime of `pid` (and of its reaped children: lighttpd's CGI processes)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + (cutime + cstime if reaped_children else 0)) / TICK


def measure(args, server, lighttpd, name, op):
    """(name, wall seconds, gitstate CPU seconds, git server CPU seconds) of --runs op(i)."""
    perf = None
    if args.perf and name == args.perf_op:
        perf = s.spawn(["perf", "record", "-q", "-F", "4999", "--call-graph", "dwarf,16384",
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
        s.stop(perf, sig=signal.SIGINT)
    return name, wall, g1 - g0, s1 - s0


def run(args):
    """Measures the three operations, then prints the table."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-cpu-")
    rows = []
    githttp, server = s.gitstate_on_git_http(args.gitstate, root, log=subprocess.DEVNULL)
    try:
        client = server.client()
        path = "/state/default/cpu.tfstate"
        serial = [1]
        client.request("POST", path, s.state_body(serial[0], args.size))
        client.request("GET", path)

        def post(i):
            serial[0] += 1
            client.request("POST", path, s.state_body(serial[0], args.size))

        def lock_unlock(i):
            body = s.lock_body(f"cpu-{i}")
            client.request("LOCK", path, body)
            client.request("UNLOCK", path, body)

        for name, op in (("GET", lambda i: client.request("GET", path)), ("POST", post),
                         ("LOCK + UNLOCK", lock_unlock)):
            rows.append(measure(args, server, githttp.proc, name, op))
    finally:
        s.shut_down(root, server, githttp)

    print(f"{args.runs} runs per operation; {args.size}-byte state; loopback; {os.cpu_count()} cores; "
          f"load average (1 min) {os.getloadavg()[0]:.1f}")
    print()
    s.table_header("operation", "wall ms / op", "gitstate CPU ms / op", "git server CPU ms / op")
    for name, wall, gs, srv in rows:
        n = args.runs
        print(f"| {name} | {wall / n * 1000:.1f} | {gs / n * 1000:.2f} | {srv / n * 1000:.2f} |")
