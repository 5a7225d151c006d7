"""LOCK and UNLOCK on the embedded repository next to a large state: what an UNLOCK reads.

Starts `gitstate serve` on a fresh embedded default repository, POSTs a Terraform-shaped state of
--mb MB, then times --runs LOCK / UNLOCK pairs on one kept-alive connection. An UNLOCK reads the
lock branch only (its file and the token its commit records), never the state beside it, so its
time should not grow with the state.

With --incompressible, each resource's `user_data` is random hex (the state's blob then costs
its full size to inflate, as a state of keys and certificates does).

Usage: scripts/bench embedded-lock [--mb 4] [--runs 40] [--incompressible] [--gitstate PATH]
Prints a markdown table.
"""
import http.client
import json
import os
import tempfile

from benchlib import support as s
from benchlib.benches.large_state import state

PATH = "/state/default/big.tfstate"


def add_arguments(parser):
    """--mb, --runs, --gitstate."""
    parser.add_argument("--mb", type=int, default=4)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--incompressible", action="store_true")
    s.add_gitstate_argument(parser)


def run(args):
    """Prints LOCK and UNLOCK times (median, min–max) for the state size asked for."""
    body = state(args.mb)
    if args.incompressible:
        document = json.loads(body)
        for resource in document["resources"]:
            resource["instances"][0]["attributes"]["user_data"] = os.urandom(100).hex()
        body = json.dumps(document, indent=2).encode()
    root = tempfile.mkdtemp(prefix="gitstate-bench-lock-")
    port = s.free_port()
    server = s.spawn([args.gitstate, "serve", "--listen", f"127.0.0.1:{port}"], cwd=root,
                     stdout=s.log_file(root, "serve.log"), stderr=s.log_file(root, "serve.log"))
    try:
        s.wait_http(f"http://127.0.0.1:{port}/_/health", proc=server)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        s.timed_request(conn, "POST", PATH, body)
        locks, unlocks = [], []
        for i in range(args.runs):
            info = json.dumps({"ID": f"bench-{i}", "Operation": "OperationTypeApply", "Info": "",
                               "Who": "bench@host", "Version": "1.15.5",
                               "Created": "2026-11-28T10:00:00Z", "Path": ""}).encode()
            locks.append(s.timed_request(conn, "LOCK", PATH, info))
            unlocks.append(s.timed_request(conn, "UNLOCK", PATH, info))
    finally:
        s.stop(server)
        s.remove_root(root)
    kind = "incompressible" if args.incompressible else "compressible"
    print(f"{args.runs} LOCK/UNLOCK pairs next to a {len(body)}-byte {kind} state, embedded repository")
    print()
    print("| operation | ms, median (min–max) |")
    print("|---|---|")
    print(f"| LOCK | {s.cell(locks, '.2f')} |")
    print(f"| UNLOCK | {s.cell(unlocks, '.2f')} |")
    return 0
