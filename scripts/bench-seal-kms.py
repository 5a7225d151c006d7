#!/usr/bin/env python3
"""What a fresh data key per write costs (issue 15): warm POST latency through `gitstate serve`
with a KMS key on moto, for two gitstate binaries side by side (e.g. before: the stored data key
reused, no KMS call on a warm write; after: one KMS Encrypt per write per key), requests
interleaved so both see the same machine noise; plus moto's own KMS Encrypt latency, measured
directly, and the same POST with an age recipient (a local wrap) for reference.

Usage: scripts/bench-seal-kms.py --before BIN --after BIN [--runs 200] [--size 10240]
Needs moto (scripts/install-test-deps.sh puts it in $GITSTATE_TOOLS/moto-5.2.5).
Prints markdown rows for docs/BENCHMARKS.md.
"""
import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import free_port, wait_http  # noqa: E402
from importlib import import_module

enc = import_module("bench-encryption")

TOOLS = os.environ.get("GITSTATE_TOOLS", os.path.expanduser("~/.cache/gitstate-tools"))


def kms(endpoint, target, body):
    req = urllib.request.Request(endpoint, data=json.dumps(body).encode(), method="POST", headers={
        "X-Amz-Target": target,
        "Content-Type": "application/x-amz-json-1.1",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=0",
    })
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def stats(samples):
    return f"{statistics.median(samples):.1f} ({min(samples):.1f}–{max(samples):.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=10240)
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="gitstate-bench-seal-kms-")
    moto_port = free_port()
    moto = subprocess.Popen([os.path.join(TOOLS, "moto-5.2.5", "bin", "moto_server"), "-H", "127.0.0.1",
                             "-p", str(moto_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes = [moto]
    try:
        endpoint = f"http://127.0.0.1:{moto_port}"
        wait_http(endpoint + "/moto-api/")
        arn = enc.moto_kms_key(endpoint)
        aws = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}

        # moto's Encrypt of a 32-byte data key, from Python (no gitstate involved)
        direct = []
        for _ in range(args.runs):
            start = time.perf_counter()
            kms(endpoint, "TrentService.Encrypt", {
                "KeyId": arn, "Plaintext": base64.b64encode(os.urandom(32)).decode(),
                "EncryptionContext": {"gitstate_repository": "default", "gitstate_path": "bench.tfstate"}})
            direct.append((time.perf_counter() - start) * 1000)

        servers = {}
        for name, binary, flags in [
            ("before, KMS", args.before, ["--kms-arn", arn]),
            ("after, KMS", args.after, ["--kms-arn", arn]),
            ("before, age", args.before, ["--age-recipient", enc.AGE_RECIPIENT]),
            ("after, age", args.after, ["--age-recipient", enc.AGE_RECIPIENT]),
        ]:
            workdir = tempfile.mkdtemp(dir=root)
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("GITSTATE_", "SOPS_", "AWS_"))}
            env.update(aws)
            env["RUST_LOG"] = "warn"
            server = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}",
                                       "--encryption-mode", "all", *flags],
                                      cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(workdir, "log"), "w"))
            processes.append(server)
            wait_http(f"http://127.0.0.1:{port}/_/health")
            client = enc.Client(port)
            client.request("POST", "/state/default/bench.tfstate", enc.state_body(1, args.size))
            servers[name] = (client, [])

        bodies = [enc.state_body(serial, args.size) for serial in range(2, args.runs + 2)]
        for body in bodies:
            for client, samples in servers.values():
                start = time.perf_counter()
                client.request("POST", "/state/default/bench.tfstate", body)
                samples.append((time.perf_counter() - start) * 1000)

        print(f"| measurement ({len(bodies[0]):,}-byte state, {args.runs} runs, interleaved) | median (min–max) ms |")
        print("|---|---|")
        print(f"| moto KMS Encrypt of a data key, direct from Python | {stats(direct)} |")
        for name, (_, samples) in servers.items():
            print(f"| warm POST, {name} | {stats(samples)} |")
    finally:
        for p in processes:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
