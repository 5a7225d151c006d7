#!/usr/bin/env python3
"""Cost of the DynamoDB catalog (moto on loopback): write overhead per request with the catalog on
vs off, how long until the catalog shows a write, and query latency.

Two `gitstate serve` on the embedded default repository (no network git, so nothing hides the
difference), one with `--catalog-table`, one without. Each state is Terraform-shaped with
`--resources` aws_instance resources (id and arn indexed). Measured:

  POST / LOCK / UNLOCK       catalog on vs off (the catalog is written after the answer)
  catalog lag                POST answered -> /_/catalog/states shows the new serial
  /_/catalog/states          with --states states in the table
  /_/catalog/find            one identifier
  /_/catalog/duplicates      a scan of every indexed identifier
  /_/catalog/audit           one state's trail

Usage: scripts/bench-catalog.py [--runs 30] [--states 100] [--resources 10] [--gitstate PATH]
Needs moto (scripts/install-test-deps.sh puts it in $GITSTATE_TOOLS/moto-5.2.5). Prints markdown
tables (median, min-max) for docs/BENCHMARKS.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (shared helpers)
from bench import free_port, lock_body, wait_http  # noqa: E402

TOOLS = os.environ.get("GITSTATE_TOOLS", os.path.expanduser("~/.cache/gitstate-tools"))
TABLE = "bench-catalog"


def state_body(state_index, serial, resources):
    """A Terraform-shaped state whose instances have unique ids and ARNs."""
    items = []
    for i in range(resources):
        iid = f"i-{state_index:08x}{i:08x}"
        items.append({
            "mode": "managed", "type": "aws_instance", "name": f"web{i}",
            "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
            "instances": [{"schema_version": 1, "attributes": {
                "id": iid, "arn": f"arn:aws:ec2:eu-west-1:111122223333:instance/{iid}",
                "instance_type": "t3.micro", "tags": {"Name": f"web-{i}"}},
                "sensitive_attributes": []}],
        })
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": f"bench-{state_index}", "outputs": {}, "resources": items},
                      indent=2).encode()


class Client(bench.Client):
    """bench.py's kept-alive client, timing requests."""

    def timed(self, method, path, body=None, expect=200):
        start = time.perf_counter()
        data = self.request(method, path, body, expect)
        return (time.perf_counter() - start) * 1000, data


def summary(samples):
    return f"{statistics.median(samples):.1f} ({min(samples):.1f}–{max(samples):.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--states", type=int, default=100)
    parser.add_argument("--resources", type=int, default=10)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target"))
    parser.add_argument("--gitstate", default=os.path.join(target, "release", "gitstate"))
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="gitstate-bench-catalog-")
    moto_port = free_port()
    moto_bin = os.path.join(TOOLS, "moto-5.2.5", "bin", "moto_server")
    processes = [subprocess.Popen([moto_bin, "-H", "127.0.0.1", "-p", str(moto_port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        endpoint = f"http://127.0.0.1:{moto_port}"
        wait_http(endpoint + "/moto-api/")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITSTATE_", "AWS_"))}
        env.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                    "RUST_LOG": "warn"})
        subprocess.run([args.gitstate, "catalog", "create-table", "--catalog-table", TABLE],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        clients = {}
        for name, flags in [("off", []), ("on", ["--catalog-table", TABLE])]:
            workdir = tempfile.mkdtemp(dir=root)
            port = free_port()
            processes.append(subprocess.Popen(
                [args.gitstate, "serve", "--listen", f"127.0.0.1:{port}", *flags],
                cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(workdir, "log"), "w")))
            wait_http(f"http://127.0.0.1:{port}/_/health")
            clients[name] = Client(port)

        # Fill the catalog server with --states states (first writes are not measured).
        on = clients["on"]
        for s in range(args.states):
            on.request("POST", f"/state/default/fill/s{s}.tfstate",
                       state_body(s, 1, args.resources))
        # Let the background recording (entries, then index updates, in order) drain before
        # measuring: the last identifier of the last state is indexed last.
        last = f"/_/catalog/find?identifier=i-{args.states - 1:08x}{args.resources - 1:08x}"
        started = time.time()
        while json.loads(on.request("GET", last)) == []:
            if time.time() - started > 600:
                raise SystemExit("the catalog did not index the filled states within 10 minutes")
            time.sleep(0.5)
        fill_seconds = time.time() - started

        print(f"States: {args.resources} aws_instance resources each "
              f"({len(state_body(0, 1, args.resources))} bytes), {args.states} states in the table, "
              f"{args.runs} runs, median (min–max) ms. Recording the {args.states} filling writes "
              f"finished {fill_seconds:.1f} s after the last was answered.\n")
        print("| operation | catalog off | catalog on | difference |")
        print("|---|---|---|---|")
        for op in ["POST", "LOCK", "UNLOCK"]:
            results = {}
            for name, client in clients.items():
                samples = []
                for run in range(args.runs):
                    path = "/state/default/bench.tfstate"
                    if op == "POST":
                        body = state_body(10_000, 100 + run + (0 if name == "off" else 0),
                                          args.resources)
                        ms, _ = client.timed("POST", path, body)
                    elif op == "LOCK":
                        ms, _ = client.timed("LOCK", path, lock_body(f"l{run}"))
                        client.request("UNLOCK", path, lock_body(f"l{run}"))
                    else:
                        client.request("LOCK", path, lock_body(f"u{run}"))
                        ms, _ = client.timed("UNLOCK", path, lock_body(f"u{run}"))
                    samples.append(ms)
                results[name] = samples
            diff = statistics.median(results["on"]) - statistics.median(results["off"])
            print(f"| {op} | {summary(results['off'])} | {summary(results['on'])} | {diff:+.1f} |")

        # Catalog lag: answer of a POST -> the entry shows its serial.
        lags = []
        for run in range(min(args.runs, 15)):
            serial = 1000 + run
            path = "/state/default/lag.tfstate"
            on.request("POST", path, state_body(20_000, serial, args.resources))
            start = time.perf_counter()
            while True:
                entries = json.loads(on.request("GET", "/_/catalog/states"))
                if any(e["path"] == "lag.tfstate" and e["serial"] == serial for e in entries):
                    break
                if time.perf_counter() - start > 30:
                    shown = [e for e in entries if e["path"] == "lag.tfstate"]
                    raise SystemExit(f"the catalog did not show serial {serial} within 30 s: {shown}")
            lags.append((time.perf_counter() - start) * 1000)

        print("\n| query | median (min–max) ms |")
        print("|---|---|")
        print(f"| catalog lag: POST answered → `/_/catalog/states` shows it (includes one states query) | {summary(lags)} |")
        queries = [
            (f"`/_/catalog/states` ({args.states + 3} states)", "/_/catalog/states"),
            ("`/_/catalog/find?identifier=…` (one identifier)",
             f"/_/catalog/find?identifier=i-{5:08x}{3:08x}"),
            (f"`/_/catalog/duplicates` ({2 * args.resources * (args.states + 3)} identifiers indexed, none shared)",
             "/_/catalog/duplicates"),
            ("`/_/catalog/audit/default/bench.tfstate`", "/_/catalog/audit/default/bench.tfstate"),
        ]
        for label, path in queries:
            samples = [on.timed("GET", path)[0] for _ in range(args.runs)]
            print(f"| {label} | {summary(samples)} |")
        cli = []
        for _ in range(min(args.runs, 10)):
            start = time.perf_counter()
            subprocess.run([args.gitstate, "catalog", "find", f"i-{5:08x}{3:08x}",
                            "--catalog-table", TABLE], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            cli.append((time.perf_counter() - start) * 1000)
        print(f"| `gitstate catalog find …` (whole command, process start included) | {summary(cli)} |")
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            p.wait()


if __name__ == "__main__":
    main()
