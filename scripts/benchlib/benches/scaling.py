"""Scaling: latency vs a repository's history and breadth, and concurrent writers to one repository.

Does gitstate's latency grow with a repository's history or with the number of other states in
it, and what do concurrent writers to one repository get?

1. History and breadth. For each (commits, states) pair of --depths x --states, a bare repository
   is built with `git fast-import`: a first commit holding `states` state files
   (team/s0000.tfstate, ...; --state-bytes each, Terraform-shaped JSON) and then `commits - 1`
   commits, each changing one state (round robin), as gitstate writes them. Served by lighttpd +
   `git http-backend` (CGI, basic auth, as in `scripts/bench http`), then measured on team/s0000.tfstate:

     cold GET / POST   a fresh `gitstate serve` with a fresh --cache-dir, its first request
                       (--cold-runs times; the server's start is not timed)
     warm GET / POST   one server, after one untimed request, --runs requests on one connection
     git clone         `git clone --depth 1` of the same repository (reference: the smart-HTTP
                       server's own cost of a cold shallow read)
     embedded          the same repository as `gitstate serve --data-dir`'s default.git (no
                       network git): cold (fresh server) and warm GET / POST

2. Concurrency. W = --writers threads, each on its own state (w000.tfstate, ...) in one repository
   (a copy of the largest one built above), each POSTing increasing serials through gitstate
   (each thread keeps one connection open), --writes-total POSTs in all, started together on a
   barrier. Either one gitstate server, or --servers servers sharing the remote (as separate
   Lambda containers or CI runners would), writers assigned round robin. Reports throughput
   (writes/s over the wall time), p50/p99 latency, and contention retries per write, read from the
   servers' logs ("state written" carries `attempt`, 0 for the first try); checks that the branch
   gained exactly one commit per write and that every state ends at its last serial.

Usage: scripts/bench scaling [--depths 100,1000,10000] [--states 1,50,500] [--runs 20]
                             [--cold-runs 5] [--writers 1,4,16,64] [--servers 4]
                             [--writes-total 192] [--gitstate PATH] [--skip-scaling|--skip-concurrency]
Prints markdown tables for docs/BENCHMARKS.md.
"""

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import support as s
from benchlib.support import cell, percentile, timed_request

RUST_LOG = os.environ.get("BENCH_RUST_LOG", "info")  # e.g. info,gitstate_core=debug
LINEAGE = "6f1c2a9e-5b0d-4c3e-9a7f-scaling"


def state_json(index, serial, size):
    """A Terraform-shaped state of about `size` bytes; distinct per state and serial."""
    def resource(n):
        return {"mode": "managed", "type": "null_resource", "name": f"r{n}",
                "provider": "provider[\"registry.terraform.io/hashicorp/null\"]",
                "instances": [{"index_key": n, "schema_version": 0, "attributes": {
                    "id": str(10**18 + index * 7919 + serial * 104729 + n), "triggers": {"index": str(n)}},
                    "sensitive_attributes": []}]}
    count = max(0, (size - 200) // len(json.dumps(resource(0), indent=4)))
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": f"{LINEAGE}-{index:04d}", "outputs": {},
                       "resources": [resource(n) for n in range(count)]}, indent=2).encode() + b"\n"


def build_repo(path, commits, states, size):
    """Bare repository with `commits` commits on main and `states` state files (fast-import)."""
    s.init_bare(path)
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=path, stdin=subprocess.PIPE)
    out = proc.stdin
    when = 1_700_000_000
    serials = [1] * states

    def commit(message, files):
        nonlocal when
        when += 60
        msg = message.encode()
        out.write(b"commit refs/heads/main\n")
        out.write(f"committer gitstate <gitstate@localhost> {when} +0000\n".encode())
        out.write(b"data %d\n%s\n" % (len(msg), msg))
        for name, data in files:
            out.write(f"M 100644 inline {name}\ndata {len(data)}\n".encode())
            out.write(data + b"\n")

    commit(f"Add {states} states", [(f"team/s{i:04d}.tfstate", state_json(i, 1, size)) for i in range(states)])
    for n in range(1, commits):
        i = n % states
        serials[i] += 1
        commit(f"Update team/s{i:04d}.tfstate (serial {serials[i]}) by bench",
               [(f"team/s{i:04d}.tfstate", state_json(i, serials[i], size))])
    out.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")
    s.git("repack", "-adq", cwd=path)
    return serials[0]


def start_server(gitstate, root, name, args, env=None):
    """`gitstate serve --log-format json ARGS` with the git credentials, logging to root/NAME.log."""
    return s.Gitstate(gitstate, ["--log-format", "json", *args],
                      dict(s.git_credentials_env(RUST_LOG), **(env or {})), root, log=f"{name}.log")


def scaling(args, root, remote_base, repos, grid):
    """Part 1: cold, warm and embedded latency and `git clone` for every (commits, states) cell."""
    rows = []
    target = "team/s0000.tfstate"
    path = f"/state/default/{target}"
    for commits, states in grid:
        name = f"c{commits}-s{states}.git"
        remote = f"{remote_base}/{name}"
        serial = [grid[(commits, states)] + 1]

        def next_body():
            serial[0] += 1
            return state_json(0, serial[0], args.state_bytes)

        cold_get, cold_post, clone = [], [], []
        for i in range(args.cold_runs):
            for kind, samples in (("GET", cold_get), ("POST", cold_post)):
                cache = tempfile.mkdtemp(prefix="cache-", dir=root)
                server = start_server(args.gitstate, root, "cold", ["--repository", f"default={remote}",
                                                              "--cache-dir", cache])
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
                    if kind == "GET":
                        samples.append(timed_request(conn, "GET", path))
                    else:
                        samples.append(timed_request(conn, "POST", path, next_body()))
                finally:
                    server.stop()
                    shutil.rmtree(cache, ignore_errors=True)
            work = os.path.join(root, "clone")
            auth = s.with_credentials(remote)
            start = time.perf_counter()
            s.git("clone", "-q", "--bare", "--depth", "1", auth, work)
            clone.append((time.perf_counter() - start) * 1000)
            shutil.rmtree(work)

        cache = tempfile.mkdtemp(prefix="cache-", dir=root)
        server = start_server(args.gitstate, root, "warm", ["--repository", f"default={remote}", "--cache-dir", cache])
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            timed_request(conn, "GET", path)
            warm_get = [timed_request(conn, "GET", path) for _ in range(args.runs)]
            timed_request(conn, "POST", path, next_body())
            warm_post = [timed_request(conn, "POST", path, next_body()) for _ in range(args.runs)]
        finally:
            server.stop()
            shutil.rmtree(cache, ignore_errors=True)

        # The same repository as the embedded default (a copy: gix writes to it directly).
        data = os.path.join(root, "embedded")
        shutil.copytree(os.path.join(repos, name), os.path.join(data, "default.git"), symlinks=True)
        emb_cold = []
        for i in range(args.cold_runs):
            server = start_server(args.gitstate, root, "embedded", ["--data-dir", data])
            try:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
                emb_cold.append(timed_request(conn, "GET", path))
            finally:
                server.stop()
        server = start_server(args.gitstate, root, "embedded", ["--data-dir", data])
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            timed_request(conn, "GET", path)
            emb_get = [timed_request(conn, "GET", path) for _ in range(args.runs)]
            timed_request(conn, "POST", path, next_body())
            emb_post = [timed_request(conn, "POST", path, next_body()) for _ in range(args.runs)]
        finally:
            server.stop()
            shutil.rmtree(data)
        row = (commits, states, cold_get, cold_post, warm_get, warm_post, clone, emb_cold, emb_get, emb_post)
        rows.append(row)
        print(f"  {commits} commits, {states} states: cold GET {cell(cold_get)}, warm GET {cell(warm_get)}, "
              f"warm POST {cell(warm_post)}", file=sys.stderr)
    return rows


def concurrency(args, root, remote):
    """Part 2: concurrent writers on one server or --servers servers; one row per cell."""
    rows = []
    for servers_n in (1, args.servers):
        for writers in args.writers:
            if servers_n > 1 and writers == 1:
                continue  # the same as one server
            cache_root = tempfile.mkdtemp(prefix="cache-", dir=root)
            servers = [start_server(args.gitstate, root, f"conc-{servers_n}-{writers}-{k}",
                              ["--repository", f"default={remote}", "--cache-dir", os.path.join(cache_root, str(k))])
                       for k in range(min(servers_n, writers))]
            per_writer = max(2, -(-args.writes_total // writers))
            try:
                conns = [http.client.HTTPConnection("127.0.0.1", servers[w % len(servers)].port, timeout=300)
                         for w in range(writers)]
                tag = f"{servers_n}x{writers}"
                paths = [f"/state/default/conc/{tag}/w{w:03d}.tfstate" for w in range(writers)]
                for w in range(writers):  # create each state, warm every connection and cache
                    timed_request(conns[w], "POST", paths[w], state_json(w, 1, args.state_bytes))
                for conn in conns[:len(servers)]:
                    timed_request(conn, "GET", paths[0])
                before = int(s.git("--git-dir", os.path.join(root, "repos", "conc.git"),
                                       "rev-list", "--count", "main").decode())
                offsets = [server.offset() for server in servers]
                latencies = [[] for _ in range(writers)]
                errors, busy = [], []
                barrier = threading.Barrier(writers + 1)

                def writer(w):
                    bodies = [state_json(w, serial, args.state_bytes) for serial in range(2, per_writer + 2)]
                    barrier.wait()
                    try:
                        for body in bodies:
                            latencies[w].append(timed_request(conns[w], "POST", paths[w], body, busy=busy))
                    except BaseException as e:  # noqa: BLE001 (reported below)
                        errors.append(f"writer {w}: {e}")

                wall = s.run_together(writer, writers, barrier)
                if errors:
                    raise SystemExit("; ".join(errors[:5]))
                after = int(s.git("--git-dir", os.path.join(root, "repos", "conc.git"),
                                      "rev-list", "--count", "main").decode())
                attempts = []
                for server, since in zip(servers, offsets):
                    for e in server.events(since):
                        if e.get("fields", {}).get("message") == "state written":
                            attempts.append(int(e["fields"]["attempt"]))
                for w in range(writers):  # every state ends at its last serial
                    conns[w].request("GET", paths[w])
                    got = json.loads(conns[w].getresponse().read())
                    if got["serial"] != per_writer + 1:
                        raise SystemExit(f"{paths[w]}: serial {got['serial']}, expected {per_writer + 1}")
            finally:
                for server in servers:
                    server.stop()
                shutil.rmtree(cache_root, ignore_errors=True)
            writes = writers * per_writer
            all_lat = [x for lat in latencies for x in lat]
            rows.append((servers_n, writers, writes, wall, all_lat, attempts, after - before, len(busy)))
            print(f"  {servers_n} server(s), {writers} writers: {writes / wall:.1f} writes/s, "
                  f"p50 {percentile(all_lat, 50):.1f} ms, p99 {percentile(all_lat, 99):.1f} ms, "
                  f"retries/write {sum(attempts) / max(1, len(attempts)):.2f}", file=sys.stderr)
    return rows


def add_arguments(parser):
    """The grid, the runs, the writers, --gitstate, what to skip, --keep."""
    parser.add_argument("--depths", default="100,1000,10000")
    parser.add_argument("--states", default="1,50,500")
    parser.add_argument("--state-bytes", type=int, default=10240)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--writers", default="1,4,16,64")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--writes-total", type=int, default=192)
    s.add_gitstate_argument(parser)
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--skip-concurrency", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


def run(args):
    """Builds the repositories, measures, prints the tables."""
    args.writers = s.int_list(args.writers)
    depths = s.int_list(args.depths)
    state_counts = s.int_list(args.states)
    s.require_lighttpd()

    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="gitstate-bench-scaling-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    http_port = s.free_port()
    lighttpd = s.start_lighttpd(root, repos, http_port)
    remote_base = f"http://127.0.0.1:{http_port}/git"
    scaling_rows, conc_rows = [], []
    try:
        grid = {}
        if not args.skip_scaling:
            for commits in depths:
                for states in state_counts:
                    start = time.perf_counter()
                    grid[(commits, states)] = build_repo(os.path.join(repos, f"c{commits}-s{states}.git"),
                                                         commits, states, args.state_bytes)
                    size = sum(os.path.getsize(os.path.join(dp, f))
                               for dp, _, fs in os.walk(os.path.join(repos, f"c{commits}-s{states}.git")) for f in fs)
                    print(f"  built {commits} commits x {states} states in {time.perf_counter() - start:.1f} s "
                          f"({size / 1e6:.1f} MB)", file=sys.stderr)
            scaling_rows = scaling(args, root, remote_base, repos, grid)
        if not args.skip_concurrency:
            conc = os.path.join(repos, "conc.git")
            commits, states = max(depths), max(state_counts)
            build_repo(conc, commits, states, args.state_bytes)
            conc_rows = concurrency(args, root, f"{remote_base}/conc.git")
    finally:
        s.stop(lighttpd)
        s.remove_root(root, args.keep)

    print(f"loopback; lighttpd + git http-backend with basic auth; {os.cpu_count()} cores; states of "
          f"{args.state_bytes} bytes (Terraform-shaped JSON); load average (1 min) {load_before[0]:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after")
    if scaling_rows:
        print()
        print(f"Latency in ms, median (min–max); cold: {args.cold_runs} fresh servers with fresh caches; "
              f"warm: {args.runs} requests on one connection.")
        print()
        print("| commits | states | cold GET | cold POST | warm GET | warm POST | `git clone --depth 1` | "
              "embedded: cold GET | embedded: warm GET | embedded: warm POST |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for commits, states, *cells in scaling_rows:
            print(f"| {commits:,} | {states} | " + " | ".join(cell(c) for c in cells) + " |")
    if conc_rows:
        print()
        print(f"Concurrent writers, each on its own state, one repository ({max(depths):,} commits, "
              f"{max(state_counts)} states before the run); latency in ms.")
        print()
        print("Retries: gitstate's own compare-and-swap retries (`attempt` of \"state written\"); "
              "503: writes that gave up after the retry limit (the client sent them again, as Terraform "
              "does; the latency includes that).")
        print()
        print("| gitstate servers | writers | writes | writes/s | p50 | p99 | max | retries per write | "
              "writes with a retry (most retries of one) | 503 answers | commits / writes |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for servers_n, writers, writes, wall, lat, attempts, commits, busy in conc_rows:
            retried = [a for a in attempts if a > 0]
            print(f"| {min(servers_n, writers)} | {writers} | {writes} | {writes / wall:.1f} | "
                  f"{percentile(lat, 50):.1f} | {percentile(lat, 99):.1f} | {max(lat):.1f} | "
                  f"{sum(attempts) / max(1, len(attempts)):.2f} | {len(retried)} ({max(retried, default=0)}) | "
                  f"{busy} | {commits} / {writes} |")

