#!/usr/bin/env python3
"""Warm request latency through `cargo lambda watch` (the Lambda runtime emulation) vs the same
router served by `gitstate serve`, on the same local bare repository (no network git, so what is
measured is the Lambda path: the emulator's HTTP front, the Runtime API round trip, the event
conversion), 10 KiB states.

Usage: scripts/bench-lambda-warm.py [--runs 30]
Needs cargo-lambda (scripts/install-lambda-tools.sh) and a release `gitstate`
(`cargo build --release -p gitstate`); builds the function with `cargo lambda watch --release`.
Prints a markdown table for docs/BENCHMARKS.md.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.environ.get("GITSTATE_TOOLS", os.path.expanduser("~/.cache/gitstate-tools"))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, prefix, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", prefix + "/_/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"nothing healthy on {port}{prefix}")


def body(serial):
    pad = "x" * (10240 - 120)
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "bench", "outputs": {}, "resources": [], "pad": pad}).encode()


def measure(port, prefix, runs):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    path = prefix + "/state/default/bench.tfstate"

    def request(method, data=None):
        start = time.perf_counter()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        elapsed = (time.perf_counter() - start) * 1000
        if response.status not in (200, 204):
            raise SystemExit(f"{method} {path}: {response.status}")
        return elapsed

    request("POST", body(1))
    posts = [request("POST", body(serial)) for serial in range(2, runs + 2)]
    gets = [request("GET") for _ in range(runs)]
    return posts, gets


def cell(samples):
    return f"{statistics.median(samples):.1f} ({min(samples):.1f}–{max(samples):.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gitstate-bench-lambda-")
    repo = os.path.join(work, "states.git")
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", repo], check=True)
    processes = []
    try:
        # the standalone server
        serve_port = free_port()
        serve = subprocess.Popen([os.path.join(TARGET, "release", "gitstate"), "serve", "--listen",
                                  f"127.0.0.1:{serve_port}", "--repository", f"default={repo}"],
                                 cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "RUST_LOG": "warn"})
        processes.append(serve)
        wait_health(serve_port, "", 30)
        serve_posts, serve_gets = measure(serve_port, "", args.runs)

        # the function under cargo lambda watch, in a session of its own (stopped with killpg)
        env_file = os.path.join(work, "lambda.env")
        with open(env_file, "w") as f:
            f.write(f'GITSTATE_REPOSITORY="default={repo}"\nRUST_LOG=warn\n')
        watch_port = free_port()
        env = dict(os.environ)
        env["PATH"] = os.path.join(TOOLS, "cargo-lambda-venv", "bin") + os.pathsep + env["PATH"]
        log = open(os.path.join(work, "watch.log"), "w")
        watch = subprocess.Popen(["cargo", "lambda", "watch", "--release", "--ignore-changes",
                                  "-A", "127.0.0.1", "-P", str(watch_port), "-p", "gitstate-lambda",
                                  "--env-file", env_file],
                                 cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
        processes.append(watch)
        prefix = "/lambda-url/gitstate-lambda"
        wait_health(watch_port, prefix, 900)
        lambda_posts, lambda_gets = measure(watch_port, prefix, args.runs)

        print(f"runs: {args.runs}; 10 KiB state; local bare repository; release builds\n")
        print("| operation | gitstate serve median (min–max) ms | cargo lambda watch median (min–max) ms | difference ms |")
        print("|---|---|---|---|")
        for name, a, b in (("GET", serve_gets, lambda_gets), ("POST", serve_posts, lambda_posts)):
            print(f"| {name} | {cell(a)} | {cell(b)} | {statistics.median(b) - statistics.median(a):+.1f} |")
    finally:
        for p in processes:
            try:
                if p.args[0] == "cargo" and os.getpgid(p.pid) == p.pid:
                    os.killpg(p.pid, signal.SIGTERM)  # its own session: never our group
                else:
                    p.terminate()
            except ProcessLookupError:
                continue
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
