"""Large states through the standalone server: POST and GET of a ~100 MB state, peak RSS, 413.

POST and GET of a ~100 MB Terraform-shaped state on the embedded default repository, with the
server's peak resident memory read by /usr/bin/time -v (goal, issue 7: peak RSS <= 4x the state
size), and a POST over the configured maximum answered with 413 before the body is read.

Usage: scripts/bench large-state [--mb 100] [--gitstate PATH]
Prints a markdown table for docs/RELIABILITY.md.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

from benchlib import support as s


def add_arguments(parser):
    """--mb, --gitstate."""
    parser.add_argument("--mb", type=int, default=100)
    s.add_gitstate_argument(parser)


def state(mb):
    """A Terraform-shaped state of about `mb` MB."""
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


def request(port, method, path, body=None):
    """(status, body, ms) of one request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request(method, path, body=body, headers=s.JSON)
    response = conn.getresponse()
    data = response.read()
    return response.status, data, s.ms_since(start)


def over_maximum(port, path, limit):
    """(status, ms) of a POST announcing limit + 1 bytes: the server answers from Content-Length
    alone and never reads the body, so only the headers are sent."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {limit + 1}\r\nConnection: close\r\n\r\n".encode())
        answer = raw.recv(4096).decode(errors="replace")
    over_ms = s.ms_since(start)
    status = int(answer.split(" ")[1])
    assert status == 413, answer[:300]
    return status, over_ms


def stop_under_time(proc):
    """/usr/bin/time does not forward signals: stops its child, gitstate, gracefully (SIGINT)."""
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        children = f.read().split()
    for child in children:
        os.kill(int(child), signal.SIGINT)
    proc.wait(timeout=60)
    s.stop(proc)


def run(args):
    """POST, GET, the 413, then the table."""
    body = state(args.mb)
    work = tempfile.mkdtemp(prefix="gitstate-large-")
    port = s.free_port()
    rusage = os.path.join(work, "time.txt")
    limit = len(body) + 1_000_000
    server = s.spawn(["/usr/bin/time", "-v", "-o", rusage, args.gitstate, "serve", "--listen",
                      f"127.0.0.1:{port}", "--max-state-bytes", str(limit)],
                     cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env={**os.environ, "RUST_LOG": "warn"})
    try:
        s.wait_http(f"http://127.0.0.1:{port}/_/health", timeout=10)
        path = "/state/default/large.tfstate"
        status, _, post_ms = request(port, "POST", path, body)
        assert status == 200, status
        status, data, get_ms = request(port, "GET", path)
        assert status == 200 and data == body, (status, len(data))
        _, over_ms = over_maximum(port, path, limit)
    finally:
        stop_under_time(server)
    with open(rusage) as f:
        text = f.read()
    s.remove_root(work)
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) * 1024
    s.table_header("state", "POST", "GET (byte-equal)", "POST over the maximum", "server peak RSS",
                   "peak / state size")
    print(f"| {len(body):,} bytes | 200 in {post_ms:.0f} ms | 200 in {get_ms:.0f} ms | 413 in {over_ms:.0f} ms | "
          f"{peak / 1e6:.0f} MB | {peak / len(body):.2f}× |")
