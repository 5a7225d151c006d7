"""What one catalog write costs (issue 36: links across states), before/after binaries on moto.

For each binary: a `gitstate serve` on the embedded repository with the catalog and its index key
on moto. A provider state (`net.tfstate`, --shared resources whose ids other states use) is
written first; then a consumer state of about --state-kib KiB (aws_instance-like resources, each
with its own id and arn and a dozen other strings, --shared of them holding the provider's ids).
Each run POSTs the consumer with a new serial and one changed tag, then watches moto's request
log until it has been quiet for 3 s: the DynamoDB requests the write cost, and how long after
the POST's answer the last of them came (the catalog is written after the answer). The first run
(which indexes every identifier and link) is reported apart from the steady runs.

Usage: scripts/bench catalog-write --before BIN --after BIN [--runs 10] [--state-kib 1024] [--shared 50]
Prints a markdown table for docs/BENCHMARKS.md.
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import support as s

QUIET = 3.0


def add_arguments(parser):
    """--before, --after, --runs, --state-kib, --shared."""
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--state-kib", type=int, default=1024)
    parser.add_argument("--shared", type=int, default=50)


def instance(kind, name, iid, strings):
    """One managed resource of `kind` with id/arn `iid` and more string attributes."""
    return {"mode": "managed", "type": kind, "name": name,
            "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
            "instances": [{"schema_version": 1, "sensitive_attributes": [], "attributes": {
                "id": iid, "arn": f"arn:aws:ec2:eu-west-1:111122223333:{kind}/{iid}", **strings}}]}


def provider_state(shared):
    """`net.tfstate`: `shared` subnets whose ids the consumer uses."""
    resources = [instance("aws_subnet", f"s{i}", f"subnet-{i:012x}", {"cidr_block": f"10.{i // 256}.{i % 256}.0/24"})
                 for i in range(shared)]
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": 1, "lineage": "net",
                       "outputs": {}, "resources": resources}).encode()


def consumer_state(serial, kib, shared, tag):
    """About `kib` KiB of resources; the first `shared` name a provider subnet."""
    resources, i = [], 0
    while True:
        strings = {f"attr_{k}": f"value-{i:06x}-{k:02x}-{'x' * 40}" for k in range(12)}
        strings["subnet_id"] = f"subnet-{i:012x}" if i < shared else f"subnet-own-{i:08x}"
        strings["tags"] = {"Name": f"web-{i}", "Generation": tag}
        resources.append(instance("aws_instance", f"web{i}", f"i-{i:016x}", strings))
        i += 1
        body = json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                           "lineage": "app", "outputs": {}, "resources": resources}, indent=2).encode()
        if len(body) >= kib * 1024 or i > 100_000:
            return body


def settle(log_path, since_size):
    """Waits until moto's log has not grown for QUIET seconds; (requests since, time of last)."""
    last_size, last_change = os.path.getsize(log_path), time.perf_counter()
    while time.perf_counter() - last_change < QUIET:
        time.sleep(0.002)
        size = os.path.getsize(log_path)
        if size != last_size:
            last_size, last_change = size, time.perf_counter()
    with open(log_path, "rb") as log:
        log.seek(since_size)
        requests = sum(1 for line in log if b'"POST / HTTP' in line)
    return requests, last_change


def measure(name, binary, root, args):
    """(first run, steady runs) of (requests, ms after the answer) for one binary."""
    log_path = os.path.join(root, f"moto-{name}.log")
    with open(log_path, "wb") as moto_log:
        moto, endpoint = s.start_moto(log=moto_log)
    server = None
    try:
        env = s.clean_env(("GITSTATE_", "AWS_"))
        env.update(s.moto_env(endpoint, RUST_LOG="warn"))
        subprocess.run([binary, "catalog", "create-table", "--catalog-table", "bench"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        server_env = dict(env, GITSTATE_CATALOG_TABLE="bench", GITSTATE_CATALOG_KMS_ARN=s.moto_kms_key(endpoint))
        workdir = tempfile.mkdtemp(dir=root)
        server = s.Gitstate(binary, [], server_env, workdir, log=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            wait="health")
        client = server.client()
        client.request("POST", "/state/default/net.tfstate", provider_state(args.shared))
        settle(log_path, 0)
        runs = []
        for run in range(args.runs + 1):
            body = consumer_state(10 + run, args.state_kib, args.shared, f"g{run}")
            before = os.path.getsize(log_path)
            client.request("POST", "/state/default/app.tfstate", body)
            answered = time.perf_counter()
            requests, last = settle(log_path, before)
            runs.append((requests, max(0.0, (last - answered) * 1000)))
        return len(body), runs[0], runs[1:]
    finally:
        if server:
            server.stop()
        s.stop(moto)


def run(args):
    """Both binaries, then the table."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-catalog-write-")
    try:
        rows = []
        for name, binary in [("before", args.before), ("after", args.after)]:
            size, first, steady = measure(name, binary, root, args)
            rows.append((name, binary, size, first, steady))
        print(f"Consumer state {rows[0][2]} bytes ({args.shared} of its strings are a provider's ids), "
              f"{args.runs} steady runs, median (min–max):\n")
        s.table_header("binary", "first write: DynamoDB requests", "first write: ms after the answer",
                       "steady: DynamoDB requests", "steady: ms after the answer")
        for name, binary, _, first, steady in rows:
            requests = [r for r, _ in steady]
            ms = [m for _, m in steady]
            print(f"| {name} (`{binary}`) | {first[0]} | {first[1]:.0f} | {statistics.median(requests):.0f} "
                  f"({min(requests)}–{max(requests)}) | {s.cell(ms, '.0f')} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)
