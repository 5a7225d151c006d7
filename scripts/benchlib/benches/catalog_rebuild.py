"""`gitstate catalog rebuild` over many states (issue 34): time, rate, and DynamoDB write units.

Per --states N: an embedded repository (`.gitstate/default.git`) filled with `git fast-import`
in one commit: N Terraform-shaped states of --resources aws_instance resources (id and arn
indexed), in 100 folders; a fresh DynamoDB table on moto (`catalog create-table`) and a KMS key
for the index; then `gitstate catalog rebuild`, timed (on moto the time is moto's, its one
Python process at full CPU, so gitstate's own CPU time is given too). Its progress lines (standard error is
not a terminal: one every 5 s, with the rate and the time left) are kept. Write units: the
table's items after the rebuild, each costing one unit per started KiB (attribute names and
values, DynamoDB's rule for a put) to write once, counted with a scan; moto reports no consumed
capacity.

Usage: scripts/bench catalog-rebuild [--states 1000,50000] [--resources 2] [--gitstate PATH]
Needs moto (scripts/install-test-deps.sh). Prints a markdown table and the progress lines.
"""
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time

from benchlib import support as s
from benchlib.benches.catalog import state_body

TABLE = "bench-rebuild"


def add_arguments(parser):
    """--states, --resources, --gitstate."""
    parser.add_argument("--states", type=s.int_list, default=[1000, 50000],
                        help="comma-separated state counts, one rebuild each")
    parser.add_argument("--resources", type=int, default=2)
    s.add_gitstate_argument(parser)


def seed(cwd, count, resources):
    """The embedded repository under `cwd` with `count` states in one commit."""
    path = os.path.join(cwd, ".gitstate", "default.git")
    os.makedirs(os.path.dirname(path))
    s.init_bare(path)
    s.fast_import(path, ((f"f{i % 100:03}/s{i:06}.tfstate", state_body(i, 1, resources))
                         for i in range(count)))


def write_units(endpoint):
    """(items, write units) of the table: one unit per started KiB of each item's JSON size."""
    env = dict(s.clean_env(), **s.moto_env(endpoint, AWS_DEFAULT_REGION="us-east-1"))
    items = units = 0
    start = None
    while True:
        python = os.path.join(s.MOTO_BIN, "python3")
        cmd = [python, "-c", SCAN, TABLE] + ([json.dumps(start)] if start else [])
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if done.returncode != 0:
            raise SystemExit(f"scanning the table: {done.stderr.decode()[-1500:]}")
        answer = json.loads(done.stdout)
        for size in answer["sizes"]:
            items += 1
            units += max(1, -(-size // 1024))
        start = answer.get("next")
        if not start:
            return items, units


# A scan page with boto3 (moto's own dependency, in moto's environment): each item's size.
SCAN = """
import json, sys, boto3
kwargs = {"TableName": sys.argv[1]}
if len(sys.argv) > 2:
    kwargs["ExclusiveStartKey"] = json.loads(sys.argv[2])
page = boto3.client("dynamodb").scan(**kwargs)
sizes = [sum(len(name) + len(str(next(iter(value.values()))).encode()) for name, value in item.items())
         for item in page["Items"]]
print(json.dumps({"sizes": sizes, "next": page.get("LastEvaluatedKey")}))
"""


def one(binary, count, resources):
    """(seconds, gitstate's CPU seconds, items, units, progress lines) of one rebuild of `count`
    states."""
    root = tempfile.mkdtemp(prefix="gitstate-rebuild-")
    moto, endpoint = s.start_moto()
    try:
        cwd = os.path.join(root, "cwd")
        os.makedirs(cwd)
        s.log(f"catalog-rebuild: seeding {count} states")
        seed(cwd, count, resources)
        env = dict(s.clean_env(), **s.moto_env(endpoint))
        args = ["--catalog-table", TABLE]
        subprocess.run([binary, "catalog", "create-table", *args], cwd=cwd, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        env["GITSTATE_CATALOG_KMS_ARN"] = s.moto_kms_key(endpoint)
        s.log(f"catalog-rebuild: rebuilding {count} states")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([binary, "catalog", "rebuild", *args], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"rebuild failed: {done.stderr.decode()[-2000:]}")
        items, units = write_units(endpoint)
        return seconds, cpu, items, units, done.stderr.decode().splitlines()
    finally:
        s.stop(moto)
        shutil.rmtree(root, ignore_errors=True)


def run(args):
    """One rebuild per --states value."""
    binary = args.gitstate or s.default_gitstate()
    results = {n: one(binary, n, args.resources) for n in args.states}
    print(f"moto on loopback, {args.resources} indexed resources per state, embedded repository; "
          f"{os.cpu_count()} cores")
    print()
    s.table_header("states", "rebuild s (moto's)", "states/s", "gitstate CPU s", "items written",
                   "write units", "units per state")
    for n, (seconds, cpu, items, units, _) in results.items():
        s.table_row(f"{n:,}", f"{seconds:.1f}", f"{n / seconds:.0f}", f"{cpu:.1f}", f"{items:,}",
                    f"{units:,}", f"{units / n:.2f}")
    print()
    for n, (_, _, _, _, lines) in results.items():
        progress = list(dict.fromkeys(line for line in lines if "rebuild default" in line))
        shown = progress if len(progress) <= 4 else progress[:3] + ["…"] + progress[-1:]
        print(f"Progress of {n:,}: " + " | ".join(shown))
    return 0
