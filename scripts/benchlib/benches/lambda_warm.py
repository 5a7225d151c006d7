"""Lambda warm latency: `cargo lambda watch` (the runtime emulation) vs `gitstate serve`.

The same router served both ways, on the same local bare repository (no network git, so what is
measured is the Lambda path: the emulator's HTTP front, the Runtime API round trip, the event
conversion), 10 KiB states.

Usage: scripts/bench lambda-warm [--runs 30] [--gitstate PATH]
Needs cargo-lambda (scripts/install-lambda-tools.sh) and a release `gitstate`
(`cargo build --release -p gitstate`); builds the function with `cargo lambda watch --release`.
Prints a markdown table for docs/BENCHMARKS.md.
"""
import http.client
import os
import shutil
import statistics
import subprocess
import tempfile

from benchlib import support as s


def add_arguments(parser):
    """--runs, --gitstate."""
    parser.add_argument("--runs", type=int, default=30)
    s.add_gitstate_argument(parser)


def measure(port, prefix, runs):
    """(POST ms, GET ms) samples on one connection, after one untimed POST."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    path = prefix + "/state/default/bench.tfstate"

    def request(method, data=None):
        return s.timed_request(conn, method, path, data, expect=(200, 204))

    request("POST", s.state_body(1, 10240))
    posts = [request("POST", s.state_body(serial, 10240)) for serial in range(2, runs + 2)]
    gets = [request("GET") for _ in range(runs)]
    return posts, gets


def run(args):
    """The standalone server, then the function under cargo lambda watch; the table."""
    work = tempfile.mkdtemp(prefix="gitstate-bench-lambda-")
    repo = os.path.join(work, "states.git")
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", repo], check=True)
    serve = watch = None
    try:
        serve = s.Gitstate(args.gitstate, ["--repository", f"default={repo}"],
                           {**os.environ, "RUST_LOG": "warn"}, work, log=subprocess.DEVNULL, wait="health")
        serve_posts, serve_gets = measure(serve.port, "", args.runs)
        serve.stop()

        watch_port = s.free_port()
        watch = s.start_lambda_watch(work, watch_port, f'GITSTATE_REPOSITORY="default={repo}"\nRUST_LOG=warn\n',
                                     "watch.log", timeout=900)
        lambda_posts, lambda_gets = measure(watch_port, s.LAMBDA_PREFIX, args.runs)
    finally:
        if serve:
            serve.stop()
        s.stop(watch)
        shutil.rmtree(work, ignore_errors=True)

    print(f"runs: {args.runs}; 10 KiB state; local bare repository; release builds\n")
    s.table_header("operation", "gitstate serve median (min–max) ms", "cargo lambda watch median (min–max) ms",
                   "difference ms")
    for name, a, b in (("GET", serve_gets, lambda_gets), ("POST", serve_posts, lambda_posts)):
        print(f"| {name} | {s.cell(a)} | {s.cell(b)} | {statistics.median(b) - statistics.median(a):+.1f} |")
