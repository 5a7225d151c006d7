#!/usr/bin/env python3
"""Large states through the standalone server: POST and GET of a ~100 MB Terraform-shaped state
on the embedded default repository, with the server's peak resident memory read by
/usr/bin/time -v (goal, issue 7: peak RSS <= 4x the state size), and a POST over the configured
maximum answered with 413 before the body is read.

Usage: scripts/bench-large-state.py [--mb 100] [--gitstate PATH]
Prints a markdown table for docs/RELIABILITY.md.
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def state(mb):
    one = {
        "mode": "managed", "type": "aws_instance", "name": "web",
        "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
        "instances": [{"schema_version": 1, "attributes": {
            "id": "i-0123456789abcdef0", "ami": "ami-0abcdef1234567890", "instance_type": "t3.micro",
            "tags": {"Name": "web", "team": "payments"}, "user_data": "x" * 200},
            "sensitive_attributes": [], "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ=="}],
    }
    size = len(json.dumps(one, indent=2))
    count = mb * 1_000_000 // size
    resources = []
    for i in range(count):
        r = json.loads(json.dumps(one))
        r["name"] = f"web{i}"
        r["instances"][0]["attributes"]["id"] = f"i-{i:017x}"
        resources.append(r)
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": 1, "lineage": "large",
                       "outputs": {}, "resources": resources}, indent=2).encode()


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    return response.status, data, (time.perf_counter() - start) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--gitstate", default=os.path.join(TARGET, "release", "gitstate"))
    args = parser.parse_args()
    body = state(args.mb)
    work = tempfile.mkdtemp(prefix="gitstate-large-")
    port = free_port()
    rusage = os.path.join(work, "time.txt")
    limit = len(body) + 1_000_000
    server = subprocess.Popen(["/usr/bin/time", "-v", "-o", rusage, args.gitstate, "serve", "--listen",
                               f"127.0.0.1:{port}", "--max-state-bytes", str(limit)],
                              cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "RUST_LOG": "warn"})
    try:
        for _ in range(100):
            try:
                if request(port, "GET", "/_/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        path = "/state/default/large.tfstate"
        status, _, post_ms = request(port, "POST", path, body)
        assert status == 200, status
        status, data, get_ms = request(port, "GET", path)
        assert status == 200 and data == body, (status, len(data))
        # Over the maximum: the server answers from Content-Length alone and never reads the
        # body, so send only the headers and read the answer.
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {limit + 1}\r\nConnection: close\r\n\r\n".encode())
            answer = raw.recv(4096).decode(errors="replace")
        over_ms = (time.perf_counter() - start) * 1000
        status = int(answer.split(" ")[1])
        assert status == 413, answer[:300]
    finally:
        # /usr/bin/time does not forward signals: stop its child, gitstate, gracefully.
        children = open(f"/proc/{server.pid}/task/{server.pid}/children").read().split()
        for child in children:
            os.kill(int(child), 2)
        server.wait(timeout=60)
    text = open(rusage).read()
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    peak = peak_kb * 1024
    print(f"| state | POST | GET (byte-equal) | POST over the maximum | server peak RSS | peak / state size |")
    print("|---|---|---|---|---|---|")
    print(f"| {len(body):,} bytes | 200 in {post_ms:.0f} ms | 200 in {get_ms:.0f} ms | 413 in {over_ms:.0f} ms | "
          f"{peak / 1e6:.0f} MB | {peak / len(body):.2f}× |")


if __name__ == "__main__":
    sys.exit(main())
