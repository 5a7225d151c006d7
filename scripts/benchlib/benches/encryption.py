"""Cost of encryption at rest: warm POST and GET, plaintext vs sops with age and with KMS (moto).

Through `gitstate serve` on the embedded default repository (no network git, so the sealing cost
is not hidden behind transport time), for plaintext vs sops with age and with AWS KMS (moto on
loopback), in modes `all` and `structure`.

The states look like Terraform's: N resources whose instances carry a dozen attributes each, sized
to roughly 10 KiB, 1 MiB and 10 MiB.

Usage: scripts/bench encryption [--runs 15] [--sizes 10240,1048576,10485760] [--gitstate PATH]
Needs moto (scripts/install-test-deps.sh puts it in $GITSTATE_TOOLS/moto-5.2.5). Writing needs only
an age recipient (a fixed public key below). GET follows the server's own write, as on a warm
server: since 2026-11-25 it is answered from the sealer's memory of what it sealed (a comparison
of the stored bytes, no decryption); a read of a version another process wrote is not measured
here (it opens in full, as every GET did before).
Prints a markdown table (median, min-max, ratio to plaintext) for docs/BENCHMARKS.md.
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import support as s

# A fixed age key pair for the benchmark only (never used for anything else).
AGE_RECIPIENT = "age1yt3tfqlfrwdwx0z0ynwplcr6qxcxfaqycuprpmy89nr83ltx74tqdpszlw"


def add_arguments(parser):
    """--runs, --sizes, --gitstate."""
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sizes", default="10240,1048576,10485760")
    s.add_gitstate_argument(parser)


def resource(i):
    """An aws_instance resource with a dozen attributes."""
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


def serve_encrypted(binary, root, flags, extra_env):
    """`gitstate serve` on the embedded default repository of a new directory, with `flags`."""
    workdir = tempfile.mkdtemp(dir=root)
    env = s.clean_env()
    env.update(extra_env)
    env["RUST_LOG"] = "warn"
    with open(os.path.join(workdir, "log"), "w") as log:
        return s.Gitstate(binary, flags, env, workdir, log=subprocess.DEVNULL, stderr=log, wait="health"), workdir


def measure_size(client, workdir, size, runs):
    """(POST ms, GET ms, POSTed bytes, stored bytes) for one size."""
    path = f"/state/default/bench-{size}.tfstate"
    bodies = [state_body(serial, size) for serial in range(1, runs + 2)]
    client.request("POST", path, bodies[0])  # the first write wraps a new data key
    post, get = [], []
    for body in bodies[1:]:
        start = time.perf_counter()
        client.request("POST", path, body)
        post.append(s.ms_since(start))
        start = time.perf_counter()
        client.request("GET", path)
        get.append(s.ms_since(start))
    stored = s.git("--git-dir", os.path.join(workdir, ".gitstate/default.git"),
                   "cat-file", "-s", f"main:bench-{size}.tfstate").decode().strip()
    return post, get, len(bodies[-1]), int(stored)


def run(args):
    """Every configuration and size, then the table."""
    sizes = s.int_list(args.sizes)
    root = tempfile.mkdtemp(prefix="gitstate-bench-enc-")
    moto = None
    try:
        moto, endpoint = s.start_moto()
        arn = s.moto_kms_key(endpoint)
        aws = s.moto_env(endpoint)
        configs = [
            ("plaintext", [], {}),
            ("age, all", ["--age-recipient", AGE_RECIPIENT, "--encryption-mode", "all"], {}),
            ("age, structure", ["--age-recipient", AGE_RECIPIENT, "--encryption-mode", "structure"], {}),
            ("KMS (moto), all", ["--kms-arn", arn, "--encryption-mode", "all"], aws),
            ("KMS (moto), structure", ["--kms-arn", arn, "--encryption-mode", "structure"], aws),
        ]
        results = {}
        for name, flags, extra_env in configs:
            server, workdir = serve_encrypted(args.gitstate, root, flags, extra_env)
            try:
                client = server.client()
                for size in sizes:
                    results[(name, size)] = measure_size(client, workdir, size, args.runs)
            finally:
                server.stop()
    finally:
        s.stop(moto, timeout=10)
        shutil.rmtree(root, ignore_errors=True)

    s.table_header("state (POSTed bytes)", "configuration", "stored bytes", "POST median (min–max) ms", "ratio",
                   "GET median (min–max) ms", "ratio")
    for size in sizes:
        base_post = statistics.median(results[("plaintext", size)][0])
        base_get = statistics.median(results[("plaintext", size)][1])
        for name, _, _ in configs:
            post, get, posted, stored = results[(name, size)]
            pm, gm = statistics.median(post), statistics.median(get)
            print(f"| {posted:,} | {name} | {stored:,} | {s.cell(post)} | "
                  f"{pm / base_post:.2f}× | {s.cell(get)} | {gm / base_get:.2f}× |")
