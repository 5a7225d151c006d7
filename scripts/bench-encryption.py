#!/usr/bin/env python3
"""Cost of encryption at rest: warm POST and GET through `gitstate serve` on the embedded default
repository (no network git, so the sealing cost is not hidden behind transport time), for
plaintext vs sops with age and with AWS KMS (moto on loopback), in modes `all` and `structure`.

The states look like Terraform's: N resources whose instances carry a dozen attributes each, sized
to roughly 10 KiB, 1 MiB and 10 MiB.

Usage: scripts/bench-encryption.py [--runs 15] [--sizes 10240,1048576,10485760] [--gitstate PATH]
Needs moto (scripts/install-test-deps.sh puts it in $GITSTATE_TOOLS/moto-5.2.5). Writing needs only
an age recipient (a fixed public key below); GET opens with the data key the server keeps in
memory after its own write, as a warm server does.
Prints a markdown table (median, min-max, ratio to plaintext) for docs/BENCHMARKS.md.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import free_port, wait_http  # noqa: E402  (shared helpers)

TOOLS = os.environ.get("GITSTATE_TOOLS", os.path.expanduser("~/.cache/gitstate-tools"))
# A fixed age key pair for the benchmark only (never used for anything else).
AGE_RECIPIENT = "age1yt3tfqlfrwdwx0z0ynwplcr6qxcxfaqycuprpmy89nr83ltx74tqdpszlw"


def resource(i):
    return {
        "mode": "managed", "type": "aws_instance", "name": f"web{i}",
        "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
        "instances": [{
            "schema_version": 1,
            "attributes": {
                "id": f"i-{i:016x}", "ami": "ami-0abcdef1234567890",
                "arn": f"arn:aws:ec2:eu-west-1:111122223333:instance/i-{i:016x}",
                "instance_type": "t3.micro", "private_ip": f"10.0.{i // 256 % 256}.{i % 256}",
                "tags": {"Name": f"web-{i}", "team": "payments"},
                "root_block_device": [{"volume_size": 8, "encrypted": True, "iops": 3000}],
                "user_data": "x" * 64, "monitoring": False, "cpu_credits": None,
            },
            "sensitive_attributes": [], "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ==",
        }],
    }


def state_body(serial, size):
    """A state of about `size` bytes: as many resources as fit (one resource's size is measured)."""
    one = len(json.dumps(resource(0), indent=2))
    count = max(1, size // one)
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "bench", "outputs": {},
                       "resources": [resource(i) for i in range(count)]}, indent=2).encode()


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def request(self, method, path, body=None, expect=200):
        self.conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        if response.status != expect:
            raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
        return data


def moto_kms_key(endpoint):
    req = urllib.request.Request(endpoint, data=b"{}", method="POST", headers={
        "X-Amz-Target": "TrentService.CreateKey",
        "Content-Type": "application/x-amz-json-1.1",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=0",
    })
    with urllib.request.urlopen(req) as r:
        return json.load(r)["KeyMetadata"]["Arn"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sizes", default="10240,1048576,10485760")
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target"))
    parser.add_argument("--gitstate", default=os.path.join(target, "release", "gitstate"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    root = tempfile.mkdtemp(prefix="gitstate-bench-enc-")
    moto_port = free_port()
    moto_bin = os.path.join(TOOLS, "moto-5.2.5", "bin", "moto_server")
    moto = subprocess.Popen([moto_bin, "-H", "127.0.0.1", "-p", str(moto_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes = [moto]
    try:
        endpoint = f"http://127.0.0.1:{moto_port}"
        wait_http(endpoint + "/moto-api/")
        arn = moto_kms_key(endpoint)
        aws = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        configs = [
            ("plaintext", [], {}),
            ("age, all", ["--age-recipient", AGE_RECIPIENT, "--encryption-mode", "all"], {}),
            ("age, structure", ["--age-recipient", AGE_RECIPIENT, "--encryption-mode", "structure"], {}),
            ("KMS (moto), all", ["--kms-arn", arn, "--encryption-mode", "all"], aws),
            ("KMS (moto), structure", ["--kms-arn", arn, "--encryption-mode", "structure"], aws),
        ]
        results = {}
        for name, flags, extra_env in configs:
            workdir = tempfile.mkdtemp(dir=root)
            port = free_port()
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("GITSTATE_", "SOPS_", "AWS_"))}
            env.update(extra_env)
            env["RUST_LOG"] = "warn"
            server = subprocess.Popen([args.gitstate, "serve", "--listen", f"127.0.0.1:{port}", *flags],
                                      cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(workdir, "log"), "w"))
            processes.append(server)
            wait_http(f"http://127.0.0.1:{port}/_/health")
            client = Client(port)
            for size in sizes:
                path = f"/state/default/bench-{size}.tfstate"
                bodies = [state_body(serial, size) for serial in range(1, args.runs + 2)]
                client.request("POST", path, bodies[0])  # the first write wraps a new data key
                post, get = [], []
                for body in bodies[1:]:
                    start = time.perf_counter()
                    client.request("POST", path, body)
                    post.append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    client.request("GET", path)
                    get.append((time.perf_counter() - start) * 1000)
                stored = subprocess.run(["git", "--git-dir", os.path.join(workdir, ".gitstate/default.git"),
                                         "cat-file", "-s", f"main:bench-{size}.tfstate"],
                                        check=True, stdout=subprocess.PIPE).stdout.decode().strip()
                results[(name, size)] = (post, get, len(bodies[-1]), int(stored))
            server.terminate()
            server.wait()
            processes.remove(server)

        print("| state (POSTed bytes) | configuration | stored bytes | POST median (min–max) ms | ratio | GET median (min–max) ms | ratio |")
        print("|---|---|---|---|---|---|---|")
        for size in sizes:
            base_post = statistics.median(results[("plaintext", size)][0])
            base_get = statistics.median(results[("plaintext", size)][1])
            for name, _, _ in configs:
                post, get, posted, stored = results[(name, size)]
                pm, gm = statistics.median(post), statistics.median(get)
                print(f"| {posted:,} | {name} | {stored:,} | {pm:.1f} ({min(post):.1f}–{max(post):.1f}) | "
                      f"{pm / base_post:.2f}× | {gm:.1f} ({min(get):.1f}–{max(get):.1f}) | {gm / base_get:.2f}× |")
    finally:
        for p in processes:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
