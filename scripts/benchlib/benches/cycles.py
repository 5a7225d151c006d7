"""Terraform's request shape under load: whole cycles across processes that start cold.

A Terraform run does not POST alone: `terraform apply` over the http protocol sends LOCK, GET,
POST with the lock's ID and UNLOCK; through the `cloud` block it reads the workspace, locks it,
reads the current state version and downloads it, creates a state version (first without the
state, as go-tfe's upload flow does, then inline) and unlocks. On Lambda each request may reach
another container.

Setup: lighttpd + `git http-backend` (partial fetch on) serving one bare repository, behind
scripts/latency-proxy.py (--delay-ms per chunk each way; --rate-mbps per connection and
direction); a CGI wrapper logs each request that reaches `git http-backend` before its answer
(lighttpd's own access log is written about once a second, and not at all for a quiet run). For each protocol of
--protocols and each P of --processes: P `gitstate serve` processes in team mode (one Bearer
token, one run key), each with an empty cache, started right before the timed run; W = --writers
writers, each on a state of its own (added at serial 1 with git fast-import first, untimed), run
--cycles cycles each, all started on a barrier. Request j of cycle k of writer w goes to process
(w + k + j) mod P, each on a new connection (separate Terraform processes behind a Function URL).
A 502, 503 or 504 is sent again, as Terraform retries (counted as non-2xx); anything else but the
expected status fails the cycle. With --cut-percent P the proxy cuts P% of the connections to the
git server at random, after a random number of bytes in either direction (a link that drops).
With --states N the repository holds N states of --size bytes at serial 1 in --folders folders
(`scripts/bench many-states`' seed, `fNNN/sNNNNNN.tfstate`), and the http cycles write N's states
(states 0..W-1 in the first cell, W..2W-1 in the next, so each cell starts from serial 1).

With --git-cli, first (untimed, through the same proxy and request log): the git requests the git
CLI needs for the same cycle of one writer on a state of the repository, --cycles cycles. In one
kept depth-1 blobless clone: LOCK pushes a one-file commit to `locks/<path>` (a new ref: git
refuses it if the ref exists), GET fetches `main` and reads the state (git fetches the blob on
demand), POST commits the new state on that tip with plumbing (`mktree --missing`) and pushes it
(refused unless a fast-forward; `git push` first fetches an object the clone lacks, on demand),
UNLOCK deletes the lock ref. Cold: each request in a new repository, as a new container would
start: a GET or POST clones `main` (depth 1, blobless, no checkout) first.

The servers log at RUST_LOG=warn (BENCH_RUST_LOG sets another filter, e.g. to trace one run;
BENCH_KEEP=1 keeps their logs).

  http  LOCK, GET, POST ?ID=, UNLOCK on `c/<cell>/wNNN.tfstate`
  api   GET the workspace `<cell>-wNNN` by name, lock, current state version, its download, the
        create without `state` (422) and with it (201), unlock (`workspaces/<cell>-wNNN.tfstate`)

Checked after each run with the git CLI: the branch gained one commit per answered cycle (each
writes serial + 1), every state ends at its last serial, no lock branch is left.

Where a cycle's cost goes: each request's time by its kind (the http protocol's method, the
API's step), and the git server's requests by the request operation they served, summed from
every process's `gitstate_git_round_trips_total{operation=…}` (scraped at /_/metrics after the
run; `queue` is the write queue's rounds, which push the writes of many requests).

Usage: scripts/bench cycles [--protocols http,api] [--processes 1,8] [--writers 64] [--cycles 5]
                            [--delay-ms 30] [--rate-mbps 0] [--size 2000] [--cut-percent 0]
                            [--states N [--folders 100]] [--git-cli] [--gitstate PATH]
Prints the git CLI's requests per request kind (with --git-cli), then two markdown tables: per
protocol and process count, cycles/s, p50/p99 of a cycle, non-2xx, lost, the git requests per
cycle by kind and the bytes per cycle through the proxy (headers included, up / down); then per
request kind, its p50/p99 and the git requests per cycle it caused, by step.
"""
import base64
import collections
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from benchlib import support as s
from benchlib.benches import many_states, write_queue
from benchlib.benches.http import one_file_commit
from benchlib.benches.workspaces import API, RUN_KEY, TOKEN, state_version, team_args


def add_arguments(parser):
    parser.add_argument("--protocols", default="http,api")
    parser.add_argument("--processes", default="1,8")
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--rate-mbps", type=float, default=0.0)
    parser.add_argument("--size", type=int, default=2000, help="bytes of each state")
    parser.add_argument("--cut-percent", type=float, default=0.0,
                        help="share of the connections to the git server the proxy cuts at random")
    parser.add_argument("--states", type=int, default=0,
                        help="a repository of this many states in --folders folders; the http cycles write them")
    parser.add_argument("--folders", type=int, default=100)
    parser.add_argument("--git-cli", action="store_true",
                        help="first count the git requests the git CLI needs for the same cycle")
    s.add_gitstate_argument(parser)


class Router:
    """One new connection per request, to process (w + k + j) mod P; counts what it sent."""

    def __init__(self, servers):
        self.servers = servers
        self.non2xx = []
        self.times = collections.defaultdict(list)

    def send(self, route, method, path, body=None, expect=(200,), content_type="application/json",
             kind=None):
        """The answer's body; a 503 is sent again (on a new connection, to the same process). Its
        time, the retries' included, counts under `kind` (the method when none)."""
        port = self.servers[route % len(self.servers)].port
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type}
        start = time.perf_counter()
        while True:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            finally:
                conn.close()
            if response.status in expect:
                self.times[kind or method].append(s.ms_since(start))
                return data
            self.non2xx.append((response.status, data[:200]))
            if response.status not in (502, 503, 504):
                raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")

    def api(self, route, method, path, document=None, expect=(200,), kind=None):
        body = json.dumps(document).encode() if document is not None else None
        data = self.send(route, method, path, body, expect, API, kind)
        return json.loads(data) if data else None


def http_cycle(router, w, k, path, body):
    """Terraform's http cycle: LOCK, GET, POST ?ID= of `body`, UNLOCK."""
    lock_id = f"cycle-{w}-{k}"
    lock = s.lock_body(lock_id)
    base = w + k
    router.send(base, "LOCK", f"/state/default/{path}", lock)
    router.send(base + 1, "GET", f"/state/default/{path}")
    router.send(base + 2, "POST", f"/state/default/{path}?ID={lock_id}", body)
    router.send(base + 3, "UNLOCK", f"/state/default/{path}", lock)


def api_cycle(router, w, k, name, serial, size):
    """The `cloud` block's cycle on workspace `name`."""
    base = w + k
    found = router.api(base, "GET", f"/api/v2/organizations/default/workspaces/{name}",
                       kind="workspace")["data"]["id"]
    ws = f"/api/v2/workspaces/{found}"
    router.api(base + 1, "POST", f"{ws}/actions/lock", {"data": {"type": "", "attributes": {"reason": "bench"}}},
               kind="lock")
    current = router.api(base + 2, "GET", f"{ws}/current-state-version", kind="current version")
    router.send(base + 3, "GET", current["data"]["attributes"]["hosted-state-download-url"], kind="download")
    inline = state_version(serial, size)
    upload = {"data": {"type": "state-versions", "attributes": {
        k: v for k, v in inline["data"]["attributes"].items() if k != "state"}}}
    router.api(base + 4, "POST", f"{ws}/state-versions", upload, expect=(422,), kind="create (422)")
    router.api(base + 5, "POST", f"{ws}/state-versions", inline, expect=(201,), kind="create")
    router.api(base + 6, "POST", f"{ws}/actions/unlock", kind="unlock")


def measure(args, root, bare, remote, protocol, processes, index):
    """One cell (the run's `index`-th): the row's numbers."""
    cell = f"p{processes}"
    if protocol == "http" and args.states:
        # States of the repository, each cell its own: all at serial 1, each of its own lineage.
        first = index * args.writers
        names = [many_states.state_path(first + w, "folders", args.folders) for w in range(args.writers)]
        paths = names

        def body(w, serial):
            return many_states.state(first + w, serial, args.size)
    else:
        if protocol == "http":
            names = [f"c/{cell}/w{w:03}.tfstate" for w in range(args.writers)]
            paths = names
        else:
            names = [f"{cell}-w{w:03}" for w in range(args.writers)]
            paths = [f"workspaces/{name}.tfstate" for name in names]
        # The writers' states, at serial 1 (their lineage is the bench's), added without gitstate.
        s.fast_import(bare, [(path, s.state_body(1, args.size)) for path in paths], b"writers' states",
                      on_main=True)

        def body(_w, serial):
            return s.state_body(serial, args.size)
    cache_root = tempfile.mkdtemp(prefix="cache-", dir=root)
    env = dict(s.git_credentials_env(os.environ.get("BENCH_RUST_LOG", "warn")), GITSTATE_RUN_KEY=RUN_KEY)
    servers = [s.Gitstate(args.gitstate, team_args() + ["--repository", f"default={remote}", "--cache-dir",
                                                        os.path.join(cache_root, str(p))],
                          env, root, log=f"{protocol}-{cell}-{p}.log", wait="health")
               for p in range(processes)]
    router = Router(servers)
    try:
        before_tip = s.git("--git-dir", bare, "rev-parse", "main").decode().strip()
        latencies = [[] for _ in range(args.writers)]
        errors = []
        barrier = threading.Barrier(args.writers + 1)

        def writer(w):
            barrier.wait()
            for k in range(args.cycles):
                start = time.perf_counter()
                try:
                    if protocol == "http":
                        http_cycle(router, w, k, names[w], body(w, k + 2))
                    else:
                        api_cycle(router, w, k, names[w], k + 2, args.size)
                except BaseException as e:  # noqa: BLE001 (reported below)
                    errors.append(f"writer {w}: {e}")
                    return
                latencies[w].append(s.ms_since(start))

        logged_from = write_queue.git_requests(args.request_log)
        wall = s.run_together(writer, args.writers, barrier)
        logged_to = write_queue.git_requests(args.request_log)
        expected = [(paths[w], serial) for w in range(args.writers)
                    for serial in range(2, 2 + len(latencies[w]))]
        lost, extra, wrong = write_queue.check_branch(bare, before_tip, expected)
        locks_left = s.git("--git-dir", bare, "for-each-ref", "refs/heads/locks/").decode().strip()
        by_operation, repeated = collections.Counter(), collections.Counter()
        for server in servers:
            trips, repeats = round_trips(server.port)
            by_operation.update(trips)
            repeated.update(repeats)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(cache_root, ignore_errors=True)
    answered = sum(len(x) for x in latencies)
    return {"protocol": protocol, "processes": processes, "cycles": args.writers * args.cycles,
            "answered": answered, "wall": wall, "lat": [x for lat in latencies for x in lat],
            "lost": lost + wrong, "extra": extra, "locks_left": len(locks_left.splitlines()),
            "non2xx": len(router.non2xx), "codes": sorted({c for c, _ in router.non2xx}), "errors": errors,
            "times": dict(router.times), "by_operation": by_operation, "repeated": dict(repeated),
            "git": {kind: logged_to.get(kind, 0) - logged_from.get(kind, 0) for kind in logged_to}}


def git_cli_requests(args, root, bare, remote, path, serial_of):
    """{(way, request kind): git requests per cycle} the git CLI needs for the http cycle of one
    writer on `path` (its body at a serial from `serial_of(serial)`), in one kept clone ("kept")
    and in a new repository per request ("cold")."""
    remote = s.with_credentials(remote)
    lock_ref = f"refs/heads/locks/{path}"
    counts = collections.Counter()

    def new_repo(name, clone):
        work = os.path.join(root, name)
        shutil.rmtree(work, ignore_errors=True)
        if clone:
            s.git("clone", "-q", "--bare", "--depth", "1", "--filter=blob:none", "--single-branch",
                  "--branch", "main", remote, work)
        else:
            s.git("init", "-q", "--bare", work)
            s.git("remote", "add", "origin", remote, cwd=work)
        s.git("config", "user.name", "bench", cwd=work)
        s.git("config", "user.email", "bench@localhost", cwd=work)
        return work

    def lock(work, k):
        lock_commit = one_file_commit(work, path.rsplit("/", 1)[-1] + ".lock", s.lock_body(f"cli-{k}"), "Lock")
        s.git("push", "-q", "origin", f"{lock_commit}:{lock_ref}", cwd=work)

    def fetch(work):
        s.git("fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", "+main:refs/heads/main", cwd=work)

    def get(work, serial):
        body = json.loads(s.git("cat-file", "blob", f"main:{path}", cwd=work))
        assert body["serial"] == serial, (body["serial"], serial)

    def tree_with(work, parts, blob, prefix=""):
        """The tree at `prefix` of `main` with `parts` (a path below it) set to `blob`, made with
        `mktree --missing` (write-tree from an index would fetch every blob the clone left out)."""
        listing = s.git("ls-tree", f"main:{prefix}" if prefix else "main^{tree}", cwd=work).decode()
        entries = dict((line.split("\t", 1)[1], line.split("\t", 1)[0]) for line in listing.splitlines())
        name = parts[0]
        if len(parts) == 1:
            entries[name] = f"100644 blob {blob}"
        else:
            entries[name] = f"040000 tree {tree_with(work, parts[1:], blob, f'{prefix}{name}/')}"
        lines = "".join(f"{mode}\t{name}\n" for name, mode in entries.items())
        return subprocess.run(["git", "mktree", "--missing"], cwd=work, input=lines.encode(), check=True,
                              stdout=subprocess.PIPE).stdout.decode().strip()

    def post(work, serial):
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=work, input=serial_of(serial),
                              check=True, stdout=subprocess.PIPE).stdout.decode().strip()
        tree = tree_with(work, path.split("/"), blob)
        commit = s.git("commit-tree", tree, "-p", "main", "-m", f"Update {path} (serial {serial}) by git",
                       cwd=work).decode().strip()
        # git push first fetches on demand an object this clone left out (it fails without it).
        s.git("push", "-q", "origin", f"{commit}:refs/heads/main", cwd=work)
        s.git("update-ref", "refs/heads/main", commit, cwd=work)

    def unlock(work):
        s.git("push", "-q", "origin", "--delete", lock_ref, cwd=work)

    def counted(way, kind, step):
        before = write_queue.git_requests(args.request_log)
        step()
        after = write_queue.git_requests(args.request_log)
        counts[(way, kind)] += sum(after.values()) - sum(before.values())

    serial = json.loads(s.git("--git-dir", bare, "show", f"main:{path}"))["serial"]
    kept = new_repo("cli-kept", clone=True)
    for k in range(args.cycles):
        serial += 1
        counted("kept", "LOCK", lambda: lock(kept, k))
        counted("kept", "GET", lambda: (fetch(kept), get(kept, serial - 1)))
        counted("kept", "POST", lambda: post(kept, serial))
        counted("kept", "UNLOCK", lambda: unlock(kept))
    for k in range(args.cycles):
        serial += 1
        counted("cold", "LOCK", lambda: lock(new_repo("cli-cold", clone=False), k))
        counted("cold", "GET", lambda: get(new_repo("cli-cold", clone=True), serial - 1))
        counted("cold", "POST", lambda: post(new_repo("cli-cold", clone=True), serial))
        counted("cold", "UNLOCK", lambda: unlock(new_repo("cli-cold", clone=False)))
    return {key: n / args.cycles for key, n in counts.items()}


# Label values may hold braces (the API's address patterns): the labels end at the last `} `.
ROUND_TRIP = re.compile(r'^gitstate_git_round_trips_total\{(?P<labels>.*)\} (?P<value>\S+)$')
REPEATED = re.compile(r'^gitstate_git_steps_repeated_total\{step="(?P<step>[^"]*)"\} (?P<value>\S+)$')


def round_trips(port):
    """A process's requests to the git server so far, by (operation, step), and the steps it
    repeated after a broken connection, by step, from its /_/metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    auth = base64.b64encode(f"bench:{TOKEN}".encode()).decode()
    try:
        conn.request("GET", "/_/metrics", headers={"Authorization": f"Basic {auth}"})
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"/_/metrics: {response.status} {text[:200]!r}")
    counts, repeated = collections.Counter(), collections.Counter()
    for line in text.splitlines():
        m = REPEATED.match(line)
        if m:
            repeated[m.group("step")] += float(m.group("value"))
        m = ROUND_TRIP.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
            step = f"{labels.get('service', '').replace('-pack', '')} {labels.get('step', '')}"
            counts[(labels.get("operation", "other"), step)] += float(m.group("value"))
    return counts, repeated


def operation_of(protocol, kind):
    """The `operation` label the server counts a request kind's git requests under."""
    if protocol == "http":
        return kind
    return {"workspace": "API GET /api/v2/organizations/{org}/workspaces/{name}",
            "lock": "API POST /api/v2/workspaces/{id}/actions/lock",
            "current version": "API GET /api/v2/workspaces/{id}/current-state-version",
            "download": "API GET /api/v2/state-versions/{id}/download",
            "create (422)": None, "create": "API POST /api/v2/workspaces/{id}/state-versions",
            "unlock": "API POST /api/v2/workspaces/{id}/actions/unlock"}.get(kind)


def per_cycle(row, *kinds):
    """Git requests of `kinds` (all when none) per answered cycle."""
    counts = row["git"]
    total = sum(v for kind, v in counts.items() if not kinds or kind in kinds)
    return total / max(1, row["answered"])


def run(args):
    """Every (protocol, processes) cell; the table."""
    s.require_lighttpd()
    root = tempfile.mkdtemp(prefix="gitstate-bench-cycles-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    bare = os.path.join(repos, "cycles.git")
    cells = [(protocol, processes) for protocol in filter(None, args.protocols.split(","))
             for processes in s.int_list(args.processes)]
    if args.states:
        if args.states <= len(cells) * args.writers:
            raise SystemExit(f"--states {args.states}: not more than {len(cells)} cells x {args.writers} writers")
        s.log(f"cycles: seeding {args.states} states in {args.folders} folders")
        many_states.seed(bare, args.states, "folders", args.folders, args.size)
    else:
        s.init_bare(bare, allow_filter=True)
        s.fast_import(bare, [("README.tfstate", s.state_body(1, 200))], b"seed")
    http_port = s.free_port()
    args.request_log = os.path.join(root, "requests.log")
    lighttpd = s.start_lighttpd(root, repos, http_port, request_log=args.request_log)
    proxy = s.LatencyProxy(root, http_port, args.delay_ms, args.rate_mbps, cut_percent=args.cut_percent)
    remote = proxy.url("/git/cycles.git")
    rows = []
    cli = {}
    try:
        if args.git_cli:
            s.log("cycles: the git CLI's requests for the same cycle")
            if args.states:
                first = len(cells) * args.writers
                path = many_states.state_path(first, "folders", args.folders)
                cli = git_cli_requests(args, root, bare, remote, path,
                                       lambda serial: many_states.state(first, serial, args.size))
            else:
                path = "c/cli/w000.tfstate"
                s.fast_import(bare, [(path, s.state_body(1, args.size))], b"the git CLI's state", on_main=True)
                cli = git_cli_requests(args, root, bare, remote, path,
                                       lambda serial: s.state_body(serial, args.size))
        for index, (protocol, processes) in enumerate(cells):
            if protocol not in ("http", "api"):
                raise SystemExit(f"unknown protocol {protocol!r}: http or api")
            s.log(f"cycles: {protocol}, {processes} processes, {args.writers} writers x {args.cycles}")
            cuts, (up, down, _) = proxy.cuts(), proxy.read()
            row = measure(args, root, bare, remote, protocol, processes, index)
            row["cuts"] = proxy.cuts() - cuts
            # Everything the cell's processes sent and received through the proxy, per cycle.
            after_up, after_down, _ = proxy.totals(settle=1.0)
            answered = max(1, row["answered"])
            row["bytes"] = ((after_up - up) / answered, (after_down - down) / answered)
            rows.append(row)
            lat = row["lat"] or [0]
            s.log(f"  {row['answered'] / row['wall']:.1f} cycles/s, p50 {s.percentile(lat, 50):.0f} ms, "
                  f"p99 {s.percentile(lat, 99):.0f} ms, lost {row['lost']}, non-2xx {row['non2xx']} "
                  f"{row['codes']}, errors {row['errors'][:2]}, git {row['git']}, "
                  f"connections cut {row['cuts']}, steps repeated {row['repeated']}")
    finally:
        proxy.stop()
        s.stop(lighttpd)
        s.remove_root(root, bool(os.environ.get("BENCH_KEEP")), " (BENCH_KEEP)")

    rate = f", at most {args.rate_mbps:g} MB/s per connection and direction" if args.rate_mbps else ""
    if args.cut_percent:
        rate += f", {args.cut_percent:g}% of the connections cut at random"
    if args.states:
        rate += f"; {args.states:,} states in {args.folders} folders, the http cycles on them"
    print(f"lighttpd + git http-backend (partial fetch) behind a proxy adding {args.delay_ms:g} ms per chunk "
          f"each way{rate}; {os.cpu_count()} cores; {args.writers} writers x {args.cycles} cycles, states of "
          f"{args.size} bytes; cold processes, request j of cycle k of writer w on process (w + k + j) mod P, "
          "each on a new connection")
    print()
    if cli:
        print("The git CLI, one writer, the same cycle: git requests per request")
        print()
        print("| way | LOCK | GET | POST | UNLOCK | cycle |")
        print("|---|---|---|---|---|---|")
        for way in ("kept", "cold"):
            mine = [cli.get((way, kind), 0) for kind in ("LOCK", "GET", "POST", "UNLOCK")]
            print(f"| {way} | " + " | ".join(f"{n:.2f}" for n in mine) + f" | {sum(mine):.2f} |")
        print()
    print("| protocol | processes | cycles answered | cycles/s | p50 ms | p99 ms | lost | locks left | "
          "non-2xx (codes) | git requests per cycle | fetches | pushes | upload-pack adverts | "
          "receive-pack adverts | KB per cycle up / down |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["lat"] or [0]
        print(f"| {r['protocol']} | {r['processes']} | {r['answered']} / {r['cycles']} | "
              f"{r['answered'] / r['wall']:.1f} | {s.percentile(lat, 50):.0f} | {s.percentile(lat, 99):.0f} | "
              f"{r['lost']} | {r['locks_left']} | {r['non2xx']} {tuple(r['codes']) or ''} | "
              f"{per_cycle(r):.2f} | {per_cycle(r, 'POST upload-pack'):.2f} | "
              f"{per_cycle(r, 'POST receive-pack'):.2f} | {per_cycle(r, 'advert upload-pack'):.2f} | "
              f"{per_cycle(r, 'advert receive-pack'):.2f} | "
              f"{r['bytes'][0] / 1000:.1f} / {r['bytes'][1] / 1000:.1f} |")
    print()
    steps = ["receive advertisement", "upload advertisement", "upload ls-refs", "upload fetch", "receive push"]
    print("| protocol | processes | request | p50 ms | p99 ms | git requests per cycle | "
          + " | ".join(steps) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(steps))
    for r in rows:
        answered = max(1, r["answered"])
        counted = r["by_operation"]
        kinds = list(r["times"]) + ["queue", "other"]
        for kind in kinds:
            lat = r["times"].get(kind)
            operation = kind if kind in ("queue", "other") else operation_of(r["protocol"], kind)
            mine = {step: v for (op, step), v in counted.items() if op == operation}
            if not lat and not any(mine.values()):
                continue
            times = f"{s.percentile(lat, 50):.0f} | {s.percentile(lat, 99):.0f}" if lat else "– | –"
            print(f"| {r['protocol']} | {r['processes']} | {kind} | {times} | "
                  f"{sum(mine.values()) / answered:.2f} | "
                  + " | ".join(f"{mine.get(step, 0) / answered:.2f}" for step in steps) + " |")
    return 0
