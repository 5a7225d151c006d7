#!/usr/bin/env python3
"""Warm-latency benchmark: gitstate over smart HTTP vs the git CLI doing the same work.

Starts lighttpd + `git http-backend` (basic auth) on loopback, a `gitstate serve` configured with
that remote, and measures, for each state size:

  GET     gitstate GET (tip unchanged)        vs  git ls-remote + git fetch --depth 1 + git show
  POST    gitstate POST (a new serial)        vs  git commit + git push
  LOCK    gitstate LOCK                       vs  git commit (lock file) + git push to a new branch
  UNLOCK  gitstate UNLOCK                     vs  git push --delete of the lock branch

Usage: scripts/bench.py [--runs 30] [--sizes 10240,1048576] [--gitstate PATH]
Prints a markdown table (median, min-max, ratio gitstate/git) for docs/BENCHMARKS.md.
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

USER, PASSWORD = "bench", "bench-secret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def wait_http(url, timeout=30):
    """Waits until `url` answers 200 (a server's health endpoint)."""
    import urllib.request
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


def git(*args, cwd=None, env=None):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout


def http_backend_path():
    exec_path = git("--exec-path").decode().strip()
    return os.path.join(exec_path, "git-http-backend")


def start_lighttpd(root, repos, port):
    htpasswd = os.path.join(root, "htpasswd")
    # The password through stdin, never argv.
    hashed = subprocess.run(["openssl", "passwd", "-apr1", "-stdin"], check=True,
                            input=(PASSWORD + "\n").encode(),
                            stdout=subprocess.PIPE).stdout.decode().strip()
    with open(htpasswd, "w") as f:
        f.write(f"{USER}:{hashed}\n")
    conf = os.path.join(root, "lighttpd.conf")
    with open(conf, "w") as f:
        f.write(f"""
server.modules = ("mod_auth", "mod_authn_file", "mod_alias", "mod_setenv", "mod_cgi")
server.document-root = "{root}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{root}/lighttpd.err"
alias.url = ("/git/" => "{http_backend_path()}/")
$HTTP["url"] =~ "^/git/" {{
  cgi.assign = ("" => "")
  setenv.add-environment = ("GIT_PROJECT_ROOT" => "{repos}", "GIT_HTTP_EXPORT_ALL" => "1")
  auth.backend = "htpasswd"
  auth.backend.htpasswd.userfile = "{htpasswd}"
  auth.require = ("" => ("method" => "basic", "realm" => "git", "require" => "valid-user"))
}}
""")
    proc = subprocess.Popen(["lighttpd", "-D", "-f", conf])
    wait_port(port)
    return proc


def timed(fn, runs):
    samples = []
    for i in range(runs):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def state_body(serial, size):
    pad = "x" * max(0, size - 120)
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "bench", "outputs": {}, "resources": [], "pad": pad}).encode()


def lock_body(lock_id):
    return json.dumps({"ID": lock_id, "Operation": "OperationTypeApply", "Info": "",
                       "Who": "bench@host", "Version": "1.15.5",
                       "Created": "2026-11-22T00:00:00Z", "Path": ""}).encode()


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def request(self, method, path, body=None, expect=200):
        self.conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        if response.status != expect:
            raise SystemExit(f"{method} {path}: {response.status} {data[:200]!r}")
        return data


def summarize(samples):
    return statistics.median(samples), min(samples), max(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sizes", default="10240,1048576")
    parser.add_argument("--gitstate", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target")),
        "release", "gitstate"))
    args = parser.parse_args()
    if not shutil.which("lighttpd"):
        raise SystemExit("lighttpd is missing: run scripts/install-test-deps.sh")

    root = tempfile.mkdtemp(prefix="gitstate-bench-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    git("init", "--bare", "-q", "-b", "main", os.path.join(repos, "states.git"))
    git("config", "http.receivepack", "true", cwd=os.path.join(repos, "states.git"))
    http_port, gs_port = free_port(), free_port()
    lighttpd = start_lighttpd(root, repos, http_port)
    remote = f"http://127.0.0.1:{http_port}/git/states.git"
    env = dict(os.environ, GIT_USERNAME=USER, GIT_PASSWORD=PASSWORD,
               GITSTATE_CACHE_DIR=os.path.join(root, "cache"), RUST_LOG="warn")
    server = subprocess.Popen([args.gitstate, "serve", "--listen", f"127.0.0.1:{gs_port}",
                               "--repository", f"default={remote}"], env=env, cwd=root)
    rows = []
    try:
        wait_port(gs_port)
        client = Client(gs_port)
        # The git CLI baseline works in a depth-1 clone with the credential in the URL.
        auth_remote = f"http://{USER}:{PASSWORD}@127.0.0.1:{http_port}/git/states.git"
        for size in [int(s) for s in args.sizes.split(",")]:
            path = f"/state/default/bench-{size}.tfstate"
            serial = [1]
            client.request("POST", path, state_body(serial[0], size))
            client.request("GET", path)  # warm the cache

            def gs_post(i):
                serial[0] += 1
                client.request("POST", path, state_body(serial[0], size))

            results = {
                "GET": timed(lambda i: client.request("GET", path), args.runs),
                "POST": timed(gs_post, args.runs),
            }
            lock_samples, unlock_samples = [], []
            for i in range(args.runs):
                body = lock_body(f"bench-{size}-{i}")
                start = time.perf_counter()
                client.request("LOCK", path, body)
                lock_samples.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                client.request("UNLOCK", path, body)
                unlock_samples.append((time.perf_counter() - start) * 1000)
            results["LOCK"], results["UNLOCK"] = lock_samples, unlock_samples

            work = os.path.join(root, f"clone-{size}")
            git("clone", "-q", "--depth", "1", auth_remote, work)
            git("config", "user.name", "bench", cwd=work)
            git("config", "user.email", "bench@localhost", cwd=work)
            state_file = f"bench-{size}.tfstate"

            def cli_get(i):
                git("ls-remote", "origin", "refs/heads/main", cwd=work)
                git("fetch", "-q", "--depth", "1", "origin", "main", cwd=work)
                git("show", f"FETCH_HEAD:{state_file}", cwd=work)

            def cli_post(i):
                serial[0] += 1
                with open(os.path.join(work, state_file), "wb") as f:
                    f.write(state_body(serial[0], size))
                git("commit", "-q", "-am", f"Update {state_file}", cwd=work)
                git("push", "-q", "origin", "HEAD:main", cwd=work)

            cli_get(0)
            baseline = {"GET": timed(cli_get, args.runs), "POST": timed(cli_post, args.runs)}
            lock_samples, unlock_samples = [], []
            for i in range(args.runs):
                branch = f"refs/heads/locks/{state_file}"
                start = time.perf_counter()
                blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=work, input=lock_body(f"cli-{i}"),
                                      check=True, stdout=subprocess.PIPE).stdout.decode().strip()
                tree = subprocess.run(["git", "mktree"], cwd=work, check=True, stdout=subprocess.PIPE,
                                      input=f"100644 blob {blob}\t{state_file}.lock\n".encode()).stdout.decode().strip()
                commit = git("commit-tree", tree, "-m", "Lock", cwd=work).decode().strip()
                git("push", "-q", "origin", f"{commit}:{branch}", cwd=work)
                lock_samples.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                git("push", "-q", "origin", "--delete", branch, cwd=work)
                unlock_samples.append((time.perf_counter() - start) * 1000)
            baseline["LOCK"], baseline["UNLOCK"] = lock_samples, unlock_samples
            for op in ["GET", "POST", "LOCK", "UNLOCK"]:
                g, b = summarize(results[op]), summarize(baseline[op])
                rows.append((size, op, g, b, g[0] / b[0]))
    finally:
        server.terminate()
        server.wait()
        lighttpd.terminate()
        lighttpd.wait()
        shutil.rmtree(root, ignore_errors=True)

    print(f"runs per cell: {args.runs}; loopback; lighttpd + git http-backend with basic auth; "
          f"{os.cpu_count()} cores")
    print()
    print("| state size | operation | gitstate median (min–max) ms | git CLI median (min–max) ms | ratio |")
    print("|---|---|---|---|---|")
    for size, op, g, b, ratio in rows:
        print(f"| {size // 1024} KiB | {op} | {g[0]:.1f} ({g[1]:.1f}–{g[2]:.1f}) | "
              f"{b[0]:.1f} ({b[1]:.1f}–{b[2]:.1f}) | {ratio:.2f}× |")


if __name__ == "__main__":
    sys.exit(main())
