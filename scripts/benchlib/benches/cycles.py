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
                            [--gitstate PATH]
Prints two markdown tables: per protocol and process count, cycles/s, p50/p99 of a cycle,
non-2xx, lost, and the git requests per cycle by kind; then per request kind, its p50/p99 and
the git requests per cycle it caused, by step.
"""
import base64
import collections
import http.client
import json
import os
import re
import shutil
import tempfile
import threading
import time

from benchlib import support as s
from benchlib.benches import write_queue
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


def http_cycle(router, w, k, path, serial, size):
    """Terraform's http cycle: LOCK, GET, POST ?ID=, UNLOCK."""
    lock_id = f"cycle-{w}-{k}"
    lock = s.lock_body(lock_id)
    base = w + k
    router.send(base, "LOCK", f"/state/default/{path}", lock)
    router.send(base + 1, "GET", f"/state/default/{path}")
    router.send(base + 2, "POST", f"/state/default/{path}?ID={lock_id}", s.state_body(serial, size))
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


def measure(args, root, bare, remote, protocol, processes):
    """One cell: the row's numbers."""
    cell = f"p{processes}"
    if protocol == "http":
        names = [f"c/{cell}/w{w:03}.tfstate" for w in range(args.writers)]
        paths = names
    else:
        names = [f"{cell}-w{w:03}" for w in range(args.writers)]
        paths = [f"workspaces/{name}.tfstate" for name in names]
    # The writers' states, at serial 1 (their lineage is the bench's), added without gitstate.
    s.fast_import(bare, [(path, s.state_body(1, args.size)) for path in paths], b"writers' states",
                  on_main=True)
    cache_root = tempfile.mkdtemp(prefix="cache-", dir=root)
    env = dict(s.git_credentials_env("warn"), GITSTATE_RUN_KEY=RUN_KEY)
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
                        http_cycle(router, w, k, names[w], k + 2, args.size)
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
    bare = s.init_bare(os.path.join(repos, "cycles.git"), allow_filter=True)
    s.fast_import(bare, [("README.tfstate", s.state_body(1, 200))], b"seed")
    http_port = s.free_port()
    args.request_log = os.path.join(root, "requests.log")
    lighttpd = s.start_lighttpd(root, repos, http_port, request_log=args.request_log)
    proxy = s.LatencyProxy(root, http_port, args.delay_ms, args.rate_mbps, cut_percent=args.cut_percent)
    remote = proxy.url("/git/cycles.git")
    rows = []
    try:
        for protocol in filter(None, args.protocols.split(",")):
            if protocol not in ("http", "api"):
                raise SystemExit(f"unknown protocol {protocol!r}: http or api")
            for processes in s.int_list(args.processes):
                s.log(f"cycles: {protocol}, {processes} processes, {args.writers} writers x {args.cycles}")
                cuts = proxy.cuts()
                row = measure(args, root, bare, remote, protocol, processes)
                row["cuts"] = proxy.cuts() - cuts
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
    print(f"lighttpd + git http-backend (partial fetch) behind a proxy adding {args.delay_ms:g} ms per chunk "
          f"each way{rate}; {os.cpu_count()} cores; {args.writers} writers x {args.cycles} cycles, states of "
          f"{args.size} bytes; cold processes, request j of cycle k of writer w on process (w + k + j) mod P, "
          "each on a new connection")
    print()
    print("| protocol | processes | cycles answered | cycles/s | p50 ms | p99 ms | lost | locks left | "
          "non-2xx (codes) | git requests per cycle | fetches | pushes | upload-pack adverts | "
          "receive-pack adverts |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["lat"] or [0]
        print(f"| {r['protocol']} | {r['processes']} | {r['answered']} / {r['cycles']} | "
              f"{r['answered'] / r['wall']:.1f} | {s.percentile(lat, 50):.0f} | {s.percentile(lat, 99):.0f} | "
              f"{r['lost']} | {r['locks_left']} | {r['non2xx']} {tuple(r['codes']) or ''} | "
              f"{per_cycle(r):.2f} | {per_cycle(r, 'POST upload-pack'):.2f} | "
              f"{per_cycle(r, 'POST receive-pack'):.2f} | {per_cycle(r, 'advert upload-pack'):.2f} | "
              f"{per_cycle(r, 'advert receive-pack'):.2f} |")
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
