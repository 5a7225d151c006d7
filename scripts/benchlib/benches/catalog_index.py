"""What the keyed-hash resource index costs (issue 15): before/after binaries on moto.

For two gitstate binaries (before: identifiers stored in clear; after: HMAC-SHA256 hashes and
encrypted values under an index key made by KMS GenerateDataKey and kept wrapped in the table), on
moto: how long until a POSTed state's identifiers can be found, `/_/catalog/find` over HTTP (warm
server: key in memory), and `gitstate catalog find` from the command line (a new process: one
GetItem and one KMS Decrypt of the index key before the query). Also KMS GenerateMac on moto, the
alternative that was not chosen (one KMS call per identifier written or asked for).

Usage: scripts/bench catalog-index --before BIN --after BIN [--runs 30] [--resources 20]
Prints markdown rows for docs/BENCHMARKS.md.
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

from benchlib import support as s
from benchlib.benches import encryption as enc


def add_arguments(parser):
    """--before, --after, --runs, --resources."""
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--resources", type=int, default=20)


def measure_binary(args, name, binary, root, env, arn, body, wanted):
    """(name, ms until findable, HTTP find ms, CLI find ms) for one binary."""
    table = f"bench-{name}"
    subprocess.run([binary, "catalog", "create-table", "--catalog-table", table], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    workdir = tempfile.mkdtemp(dir=root)
    server_env = dict(env, GITSTATE_CATALOG_TABLE=table, GITSTATE_CATALOG_KMS_ARN=arn)
    with open(os.path.join(workdir, "log"), "w") as log:
        server = s.Gitstate(binary, [], server_env, workdir, log=subprocess.DEVNULL, stderr=log, wait="health")
    try:
        client = server.client()
        start = time.perf_counter()
        client.request("POST", "/state/default/bench.tfstate", body)
        while json.loads(client.request("GET", f"/_/catalog/find?identifier={wanted}")) == []:
            time.sleep(0.01)
        indexed = s.ms_since(start)
        http_find, cli_find = [], []
        for _ in range(args.runs):
            ms, found = client.timed("GET", f"/_/catalog/find?identifier={wanted}")
            http_find.append(ms)
            assert len(json.loads(found)) == 1, found
            start = time.perf_counter()
            out = subprocess.run([binary, "catalog", "find", wanted, "--catalog-table", table, "--json"],
                                 env=env, check=True, stdout=subprocess.PIPE).stdout
            cli_find.append(s.ms_since(start))
            assert len(json.loads(out)) == 1, out
    finally:
        server.stop()
    return name, indexed, http_find, cli_find


def generate_mac_samples(endpoint, calls):
    """Milliseconds of KMS GenerateMac calls on moto."""
    mac_key = s.kms(endpoint, "TrentService.CreateKey",
                    {"KeySpec": "HMAC_256", "KeyUsage": "GENERATE_VERIFY_MAC"})["KeyMetadata"]["KeyId"]
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        s.kms(endpoint, "TrentService.GenerateMac", {"KeyId": mac_key, "MacAlgorithm": "HMAC_SHA_256",
                                                     "Message": base64.b64encode(f"i-{i:016x}".encode()).decode()})
        samples.append(s.ms_since(start))
    return samples


def run(args):
    """Both binaries, GenerateMac, then the rows."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-catalog-index-")
    moto, rows = None, []
    try:
        moto, endpoint = s.start_moto()
        arn = s.moto_kms_key(endpoint)
        env = s.clean_env()
        env.update(s.moto_env(endpoint, RUST_LOG="warn"))
        body = json.dumps({"version": 4, "serial": 1, "lineage": "bench", "resources":
                           [enc.resource(i) for i in range(args.resources)]}).encode()
        wanted = f"i-{args.resources - 1:016x}"
        for name, binary in [("before", args.before), ("after", args.after)]:
            rows.append(measure_binary(args, name, binary, root, env, arn, body, wanted))
        generate_mac = generate_mac_samples(endpoint, args.runs * 5)
    finally:
        s.stop(moto, timeout=10)
        shutil.rmtree(root, ignore_errors=True)

    s.table_header("binary", f"POST answered → its {2 * args.resources} identifiers findable (ms)",
                   "`/_/catalog/find` median (min–max) ms", "`gitstate catalog find` median (min–max) ms")
    for name, indexed, http_find, cli_find in rows:
        print(f"| {name} | {indexed:.0f} | {s.cell(http_find)} | {s.cell(cli_find)} |")
    print(f"\nKMS GenerateMac on moto, per call: {s.cell(generate_mac)} ms ({len(generate_mac)} calls)")
