"""Cost of the DynamoDB catalog (moto): write overhead on vs off, catalog lag, query latency.

Two `gitstate serve` on the embedded default repository (no network git, so nothing hides the
difference), one with `--catalog-table`, one without. Each state is Terraform-shaped with
`--resources` aws_instance resources (id and arn indexed). Measured:

  POST / LOCK / UNLOCK       catalog on vs off (the catalog is written after the answer)
  catalog lag                POST answered -> /_/catalog/states shows the new serial
  /_/catalog/states          with --states states in the table
  /_/catalog/find            one identifier
  /_/catalog/duplicates      a scan of every indexed identifier
  /_/catalog/audit           one state's trail

Usage: scripts/bench catalog [--runs 30] [--states 100] [--resources 10] [--gitstate PATH]
Needs moto (scripts/install-test-deps.sh puts it in $GITSTATE_TOOLS/moto-5.2.5). Prints markdown
tables (median, min-max) for docs/BENCHMARKS.md.
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import support as s

TABLE = "bench-catalog"


def add_arguments(parser):
    """--runs, --states, --resources, --gitstate."""
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--states", type=int, default=100)
    parser.add_argument("--resources", type=int, default=10)
    s.add_gitstate_argument(parser)


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


def fill(on, args):
    """Fills the catalog server with --states states; seconds until their recording drained."""
    for index in range(args.states):
        on.request("POST", f"/state/default/fill/s{index}.tfstate", state_body(index, 1, args.resources))
    # Let the background recording (entries, then index updates, in order) drain before
    # measuring: the last identifier of the last state is indexed last.
    last = f"/_/catalog/find?identifier=i-{args.states - 1:08x}{args.resources - 1:08x}"
    started = time.time()
    while json.loads(on.request("GET", last)) == []:
        if time.time() - started > 600:
            raise SystemExit("the catalog did not index the filled states within 10 minutes")
        time.sleep(0.5)
    return time.time() - started


def write_overhead(clients, args):
    """Prints POST / LOCK / UNLOCK with the catalog off and on."""
    s.table_header("operation", "catalog off", "catalog on", "difference")
    path = "/state/default/bench.tfstate"
    for op in ["POST", "LOCK", "UNLOCK"]:
        results = {}
        for name, client in clients.items():
            samples = []
            for run_index in range(args.runs):
                if op == "POST":
                    ms, _ = client.timed("POST", path, state_body(10_000, 100 + run_index, args.resources))
                elif op == "LOCK":
                    ms, _ = client.timed("LOCK", path, s.lock_body(f"l{run_index}"))
                    client.request("UNLOCK", path, s.lock_body(f"l{run_index}"))
                else:
                    client.request("LOCK", path, s.lock_body(f"u{run_index}"))
                    ms, _ = client.timed("UNLOCK", path, s.lock_body(f"u{run_index}"))
                samples.append(ms)
            results[name] = samples
        diff = statistics.median(results["on"]) - statistics.median(results["off"])
        print(f"| {op} | {s.cell(results['off'])} | {s.cell(results['on'])} | {diff:+.1f} |")


def catalog_lag(on, args):
    """Milliseconds from a POST's answer to the entry showing its serial."""
    lags = []
    for run_index in range(min(args.runs, 15)):
        serial = 1000 + run_index
        on.request("POST", "/state/default/lag.tfstate", state_body(20_000, serial, args.resources))
        start = time.perf_counter()
        while True:
            entries = json.loads(on.request("GET", "/_/catalog/states"))
            if any(e["path"] == "lag.tfstate" and e["serial"] == serial for e in entries):
                break
            if time.perf_counter() - start > 30:
                shown = [e for e in entries if e["path"] == "lag.tfstate"]
                raise SystemExit(f"the catalog did not show serial {serial} within 30 s: {shown}")
        lags.append(s.ms_since(start))
    return lags


def queries(on, args, env, lags):
    """Prints the query table (lag, HTTP queries, the CLI's find)."""
    print()
    s.table_header("query", "median (min–max) ms")
    print(f"| catalog lag: POST answered → `/_/catalog/states` shows it (includes one states query) | {s.cell(lags)} |")
    for label, path in [
        (f"`/_/catalog/states` ({args.states + 3} states)", "/_/catalog/states"),
        ("`/_/catalog/find?identifier=…` (one identifier)", f"/_/catalog/find?identifier=i-{5:08x}{3:08x}"),
        (f"`/_/catalog/duplicates` ({2 * args.resources * (args.states + 3)} identifiers indexed, none shared)",
         "/_/catalog/duplicates"),
        ("`/_/catalog/audit/default/bench.tfstate`", "/_/catalog/audit/default/bench.tfstate"),
    ]:
        samples = [on.timed("GET", path)[0] for _ in range(args.runs)]
        print(f"| {label} | {s.cell(samples)} |")
    cli = []
    for _ in range(min(args.runs, 10)):
        start = time.perf_counter()
        subprocess.run([args.gitstate, "catalog", "find", f"i-{5:08x}{3:08x}", "--catalog-table", TABLE],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        cli.append(s.ms_since(start))
    print(f"| `gitstate catalog find …` (whole command, process start included) | {s.cell(cli)} |")


def run(args):
    """Two servers (catalog off, on), the fill, then the tables."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-catalog-")
    moto, servers = None, []
    try:
        moto, endpoint = s.start_moto()
        env = s.clean_env(("GITSTATE_", "AWS_"))
        env.update(s.moto_env(endpoint, RUST_LOG="warn"))
        subprocess.run([args.gitstate, "catalog", "create-table", "--catalog-table", TABLE],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        # gitstate since the keyed resource index (issue 15) needs a KMS key to make the table's
        # index key; binaries from before it ignore the variable.
        on_env = dict(env, GITSTATE_CATALOG_KMS_ARN=s.moto_kms_key(endpoint))
        clients = {}
        for name, flags, server_env in [("off", [], env), ("on", ["--catalog-table", TABLE], on_env)]:
            workdir = tempfile.mkdtemp(dir=root)
            with open(os.path.join(workdir, "log"), "w") as log:
                servers.append(s.Gitstate(args.gitstate, flags, server_env, workdir, log=subprocess.DEVNULL,
                                          stderr=log, wait="health"))
            clients[name] = servers[-1].client()
        on = clients["on"]
        fill_seconds = fill(on, args)
        print(f"States: {args.resources} aws_instance resources each "
              f"({len(state_body(0, 1, args.resources))} bytes), {args.states} states in the table, "
              f"{args.runs} runs, median (min–max) ms. Recording the {args.states} filling writes "
              f"finished {fill_seconds:.1f} s after the last was answered.\n")
        write_overhead(clients, args)
        queries(on, args, env, catalog_lag(on, args))
    finally:
        for server in servers:
            server.stop()
        s.stop(moto)
        shutil.rmtree(root, ignore_errors=True)
