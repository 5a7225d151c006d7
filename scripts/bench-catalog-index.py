#!/usr/bin/env python3
"""What the keyed-hash resource index costs (issue 15): for two gitstate binaries (before:
identifiers stored in clear; after: HMAC-SHA256 hashes and encrypted values under an index key
made by KMS GenerateDataKey and kept wrapped in the table), on moto: how long until a POSTed
state's identifiers can be found, `/_/catalog/find` over HTTP (warm server: key in memory), and
`gitstate catalog find` from the command line (a new process: one GetItem and one KMS Decrypt of
the index key before the query). Also KMS GenerateMac on moto, the alternative that was not
chosen (one KMS call per identifier written or asked for).

Usage: scripts/bench-catalog-index.py --before BIN --after BIN [--runs 30] [--resources 20]
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


def stats(samples):
    return f"{statistics.median(samples):.1f} ({min(samples):.1f}–{max(samples):.1f})"


def kms(endpoint, target, body):
    req = urllib.request.Request(endpoint, data=json.dumps(body).encode(), method="POST", headers={
        "X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=0",
    })
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--resources", type=int, default=20)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="gitstate-bench-catalog-index-")
    moto_port = free_port()
    moto = subprocess.Popen([os.path.join(TOOLS, "moto-5.2.5", "bin", "moto_server"), "-H", "127.0.0.1",
                             "-p", str(moto_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes = [moto]
    rows = []
    try:
        endpoint = f"http://127.0.0.1:{moto_port}"
        wait_http(endpoint + "/moto-api/")
        arn = enc.moto_kms_key(endpoint)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITSTATE_", "SOPS_", "AWS_"))}
        env.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "RUST_LOG": "warn"})
        body = json.dumps({"version": 4, "serial": 1, "lineage": "bench", "resources":
                           [enc.resource(i) for i in range(args.resources)]}).encode()
        wanted = f"i-{args.resources - 1:016x}"
        for name, binary in [("before", args.before), ("after", args.after)]:
            table = f"bench-{name}"
            subprocess.run([binary, "catalog", "create-table", "--catalog-table", table], env=env,
                           check=True, stdout=subprocess.DEVNULL)
            workdir = tempfile.mkdtemp(dir=root)
            port = free_port()
            server_env = dict(env, GITSTATE_CATALOG_TABLE=table, GITSTATE_CATALOG_KMS_ARN=arn)
            server = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}"], cwd=workdir,
                                      env=server_env, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(workdir, "log"), "w"))
            processes.append(server)
            wait_http(f"http://127.0.0.1:{port}/_/health")
            client = enc.Client(port)
            start = time.perf_counter()
            client.request("POST", "/state/default/bench.tfstate", body)
            while json.loads(client.request("GET", f"/_/catalog/find?identifier={wanted}")) == []:
                time.sleep(0.01)
            indexed = (time.perf_counter() - start) * 1000
            http_find, cli_find = [], []
            for _ in range(args.runs):
                start = time.perf_counter()
                found = json.loads(client.request("GET", f"/_/catalog/find?identifier={wanted}"))
                http_find.append((time.perf_counter() - start) * 1000)
                assert len(found) == 1, found
                start = time.perf_counter()
                out = subprocess.run([binary, "catalog", "find", wanted, "--catalog-table", table, "--json"],
                                     env=env, check=True, stdout=subprocess.PIPE).stdout
                cli_find.append((time.perf_counter() - start) * 1000)
                assert len(json.loads(out)) == 1, out
            rows.append((name, indexed, http_find, cli_find))
        mac_key = kms(endpoint, "TrentService.CreateKey",
                      {"KeySpec": "HMAC_256", "KeyUsage": "GENERATE_VERIFY_MAC"})["KeyMetadata"]["KeyId"]
        generate_mac = []
        for i in range(args.runs * 5):
            start = time.perf_counter()
            kms(endpoint, "TrentService.GenerateMac", {"KeyId": mac_key, "MacAlgorithm": "HMAC_SHA_256",
                                                       "Message": base64.b64encode(f"i-{i:016x}".encode()).decode()})
            generate_mac.append((time.perf_counter() - start) * 1000)

        print(f"| binary | POST answered → its {2 * args.resources} identifiers findable (ms) | "
              f"`/_/catalog/find` median (min–max) ms | `gitstate catalog find` median (min–max) ms |")
        print("|---|---|---|---|")
        for name, indexed, http_find, cli_find in rows:
            print(f"| {name} | {indexed:.0f} | {stats(http_find)} | {stats(cli_find)} |")
        print(f"\nKMS GenerateMac on moto, per call: {stats(generate_mac)} ms ({len(generate_mac)} calls)")
    finally:
        for p in processes:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
