"""The workspace API beside the http protocol: each operation of Terraform's cycle, side by side.

One `gitstate serve` in team mode (a Bearer team token, as Terraform's `cloud` block sends its
host's token) answers both protocols. For each of --states states, the http protocol runs
Terraform's http cycle on `http/sNNN.tfstate` (LOCK, GET, POST with the lock's ID, UNLOCK) and the
workspace API runs the `cloud` block's cycle on workspace `wNNN` (read the workspace by name,
lock, the current state version and its download, a new state version with the state inline,
unlock). The first cycle of each state creates it (a POST over http; the workspace's create,
then the cycle); the table counts the cycles after it.

Setups (--setups):
  embedded     the embedded default repository;
  remote       a repository behind lighttpd + `git http-backend` (CGI, basic auth), reached
               through scripts/latency-proxy.py (no delay), which counts the bytes; a CGI wrapper
               logs each request that reaches `git http-backend`. Requests and bytes per
               operation are counted on its first --count-states states. One warm process.
  remote-cold  the same, a fresh process (an empty cache) for each operation, as Lambda may
               route each request to another container: one cycle per state.

The ratio compares the median of one cycle (the sum of its operations); the API's cycle has 6
requests to the http protocol's 4 (Terraform reads the workspace, and reads the state in two).

Usage: scripts/bench workspaces [--states 10] [--cycles 5] [--size 2000] [--count-states 2]
                                [--setups embedded,remote,remote-cold] [--gitstate PATH]
With --list N (default 10,000; 0 skips it): a repository seeded with N workspace states
(`workspaces/wNNNNN.tfstate`, `git fast-import`), embedded and remote, one process each: the list's
first page (20, then 100) and a search by name, the first request of the process and then warm
(--list-runs each).

Prints one markdown table per setup.
"""
import base64
import hashlib
import http.client
import json
import os
import tempfile
import time

from benchlib import support as s

TOKEN = "bench-workspace-token"
RUN_KEY = "bench-workspaces-run-key-0123456789abcdef"
API = "application/vnd.api+json"


def add_arguments(parser):
    """--states, --cycles, --size, --setups, --count-states, --gitstate."""
    parser.add_argument("--states", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--size", type=int, default=2000, help="bytes of each state")
    parser.add_argument("--setups", default="embedded,remote,remote-cold")
    parser.add_argument("--count-states", type=int, default=2,
                        help="states whose cycles count git requests and bytes (remote)")
    parser.add_argument("--list", type=int, default=10000,
                        help="workspaces in the repository the list is timed on (0: no list)")
    parser.add_argument("--list-runs", type=int, default=20)
    s.add_gitstate_argument(parser)


class Caller:
    """One kept-alive connection with the team token as a Bearer."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def send(self, method, path, body=None, expect=(200,), content_type="application/json"):
        """The answer's body; anything but `expect` ends the benchmark."""
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status not in expect:
            raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
        return data

    def api(self, method, path, document=None, expect=(200,)):
        """A request of the workspace API: its JSON answer (None when empty)."""
        body = json.dumps(document).encode() if document is not None else None
        data = self.send(method, path, body, expect, API)
        return json.loads(data) if data else None


def state_version(serial, size):
    """The JSON:API document of a new state version, the state inline (as Terraform sends it)."""
    state = s.state_body(serial, size)
    return {"data": {"type": "state-versions", "attributes": {
        "serial": serial, "lineage": "bench", "md5": hashlib.md5(state).hexdigest(),
        "state": base64.b64encode(state).decode()}}}


class Measured:
    """Time per operation, and (with `counted`) git requests and bytes per operation."""

    def __init__(self, counted=None):
        self.counted = counted
        self.times, self.requests, self.bytes = {}, {}, {}

    def op(self, name, send, caller, count):
        """Runs `send(caller)`, keeping its time under `name` (and its git traffic when
        `count`)."""
        if count and self.counted:
            requests, size = self.counted.measure(lambda: self.op(name, send, caller, False))
            self.requests.setdefault(name, []).append(requests)
            self.bytes.setdefault(name, []).append(size)
            return
        start = time.perf_counter()
        send(caller)
        self.times.setdefault(name, []).append(s.ms_since(start))


def http_cycle(caller, measured, n, serial, size, count):
    """Terraform's http cycle on state n; `caller(op)` is the Caller of each operation."""
    path = f"/state/default/http/s{n:03}.tfstate"
    lock = s.lock_body(f"bench-{n}-{serial}")
    measured.op("lock", lambda c: c.send("LOCK", path, lock), caller("lock"), count)
    measured.op("read", lambda c: c.send("GET", path), caller("read"), count)
    measured.op("write", lambda c: c.send("POST", f"{path}?ID=bench-{n}-{serial}", s.state_body(serial, size)),
                caller("write"), count)
    measured.op("unlock", lambda c: c.send("UNLOCK", path, lock), caller("unlock"), count)


def api_cycle(caller, measured, n, serial, size, count):
    """The `cloud` block's cycle on workspace n."""
    found = {}

    def read_workspace(c):
        found["id"] = c.api("GET", f"/api/v2/organizations/default/workspaces/w{n:03}")["data"]["id"]

    def read_state(c):
        current = c.api("GET", f"/api/v2/workspaces/{found['id']}/current-state-version")
        c.send("GET", current["data"]["attributes"]["hosted-state-download-url"])

    def ws():
        return f"/api/v2/workspaces/{found['id']}"

    measured.op("workspace", read_workspace, caller("workspace"), count)
    measured.op("lock", lambda c: c.api("POST", f"{ws()}/actions/lock", {"reason": "bench"}), caller("lock"),
                count)
    measured.op("read", read_state, caller("read"), count)
    measured.op("write", lambda c: c.api("POST", f"{ws()}/state-versions", state_version(serial, size),
                                         expect=(201,)), caller("write"), count)
    measured.op("unlock", lambda c: c.api("POST", f"{ws()}/actions/unlock"), caller("unlock"), count)


def create(caller, n, size):
    """State n over http and workspace n over the API, each with a first state."""
    caller.send("POST", f"/state/default/http/s{n:03}.tfstate", s.state_body(1, size))
    caller.api("POST", "/api/v2/organizations/default/workspaces",
               {"data": {"type": "workspaces", "attributes": {"name": f"w{n:03}"}}}, expect=(201,))
    found = caller.api("GET", f"/api/v2/organizations/default/workspaces/w{n:03}")["data"]["id"]
    caller.api("POST", f"/api/v2/workspaces/{found}/actions/lock", {"reason": "bench"})
    caller.api("POST", f"/api/v2/workspaces/{found}/state-versions", state_version(1, size), expect=(201,))
    caller.api("POST", f"/api/v2/workspaces/{found}/actions/unlock")


def table(label, protocols):
    """Prints one setup's table: per operation, both protocols' medians, and the cycle ratio."""
    print(f"### {label}")
    print()
    s.table_header("operation", "http: ms", "API: ms", "http: git requests", "API: git requests",
                   "http: git bytes", "API: git bytes")
    http_m, api_m = protocols["http"], protocols["api"]

    def median(samples):
        return s.summarize(samples)[0] if samples else None

    for op in ("workspace", "lock", "read", "write", "unlock"):
        cells = []
        for values in (http_m.times, api_m.times):
            cells.append(s.cell(values[op], ".2f") if op in values else "—")
        for values in (http_m.requests, api_m.requests):
            cells.append(f"{median(values[op]):.0f}" if op in values else "—")
        for values in (http_m.bytes, api_m.bytes):
            cells.append(s.byte_size(median(values[op])) if op in values else "—")
        s.table_row(op, *cells)
    cycle = {name: sum(median(m.times[op]) for op in m.times) for name, m in protocols.items()}
    s.table_row("**cycle**", f"{cycle['http']:.2f}", f"{cycle['api']:.2f}", "", "", "", "")
    print()
    print(f"API cycle / http cycle: **{cycle['api'] / cycle['http']:.2f}×**")
    print()


def run_setup(args, label, caller, counted=None, cycles=None):
    """Creates the states, then runs the cycles of both protocols, interleaved; `caller(op)` is
    the Caller of each operation."""
    for n in range(args.states):
        create(caller("create"), n, args.size)
    protocols = {"http": Measured(counted), "api": Measured(counted)}
    cycles = cycles or args.cycles
    for cycle in range(cycles):
        s.log(f"{label}: cycle {cycle + 1}/{cycles}")
        for n in range(args.states):
            count = counted is not None and n < args.count_states
            serial = cycle + 2
            http_cycle(caller, protocols["http"], n, serial, args.size, count)
            api_cycle(caller, protocols["api"], n, serial, args.size, count)
    table(label, protocols)


def team_args():
    """Team mode with TOKEN, as a hosted endpoint runs."""
    return ["--auth-mode", "team", "--token-hash", "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()]


class Remote:
    """lighttpd + `git http-backend` with an empty states.git behind a counting proxy, and the
    `gitstate serve` processes on it, each with a cache of its own."""

    def __init__(self, args, root, env, servers):
        from benchlib.benches.lock_requests import Counted
        self.args, self.root, self.env, self.servers = args, root, env, servers
        request_log = os.path.join(root, "requests.log")
        githttp = s.GitHttp(root, request_log=request_log)
        servers.append(githttp)
        s.init_bare(os.path.join(githttp.repos, "states.git"), allow_filter=True)
        proxy = s.LatencyProxy(root, githttp.port)
        servers.append(proxy)
        self.url = proxy.url("/git/states.git")
        self.counted = Counted(request_log, proxy)
        self.started = 0

    def process(self):
        """A fresh `gitstate serve` on the repository, with an empty cache."""
        self.started += 1
        name = f"process-{self.started}"
        args = team_args() + ["--repository", f"default={self.url}", "--cache-dir", os.path.join(self.root, name)]
        server = s.Gitstate(self.args.gitstate, args, self.env, self.root, log=f"{name}.log", wait="health")
        self.servers.append(server)
        return server

    def fresh_per_operation(self):
        """`caller(op)` that starts a fresh process for each operation (stopping the last)."""
        last = []

        def caller(_op):
            if last:
                last.pop().stop()
            server = self.process()
            last.append(server)
            return Caller(server.port)
        return caller


def list_table(args, root, env, servers):
    """The list's first page on a repository of args.list workspaces, embedded and remote."""
    files = [(f"workspaces/w{i:05}.tfstate", s.state_body(1, 200)) for i in range(args.list)]
    setups = []
    cwd = os.path.join(root, "list-embedded")
    embedded = s.init_bare(os.path.join(cwd, ".gitstate", "default.git"))
    s.fast_import(embedded, files)
    setups.append(("embedded", lambda: s.Gitstate(args.gitstate, team_args(), env, cwd, log="serve.log",
                                                   wait="health")))
    githttp = s.GitHttp(os.path.join(root, "list-remote"))
    servers.append(githttp)
    remote = s.init_bare(os.path.join(githttp.repos, "states.git"), allow_filter=True)
    s.fast_import(remote, files)
    remote_args = team_args() + ["--repository", f"default={githttp.url('states.git')}",
                                 "--cache-dir", os.path.join(root, "list-cache")]
    setups.append(("remote (smart HTTP)", lambda: s.Gitstate(args.gitstate, remote_args, env, root,
                                                             log="list-remote.log", wait="health")))
    queries = [("first page (20)", "/api/v2/organizations/default/workspaces"),
               ("first page (100)", "/api/v2/organizations/default/workspaces?page%5Bsize%5D=100"),
               ("search[name]=w0999", "/api/v2/organizations/default/workspaces?search%5Bname%5D=w0999")]
    print(f"### The list: {args.list:,} workspaces")
    print()
    s.table_header("setup", "query", "first request of the process, ms", "warm, ms", "listed")
    for label, start in setups:
        s.log(f"list: {label}")
        server = start()
        servers.append(server)
        caller = Caller(server.port)
        for i, (what, query) in enumerate(queries):
            first = None
            if i == 0:
                begin = time.perf_counter()
                caller.api("GET", query)
                first = s.ms_since(begin)
            answer = {}
            warm = s.timed(lambda _: answer.update(caller.api("GET", query)), args.list_runs)
            listed = f"{len(answer['data'])} of {answer['meta']['pagination']['total-count']}"
            s.table_row(label, what, f"{first:.1f}" if first is not None else "", s.cell(warm), listed)
        server.stop()
    print()


def run(args):
    """Prints the tables."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-workspaces-")
    servers = []
    env = dict(s.git_credentials_env("warn"), GITSTATE_RUN_KEY=RUN_KEY)
    print(f"{args.states} states, {args.cycles} cycles each, states of {args.size} bytes; "
          "ms median (min–max); git requests and bytes (up + down) per operation, median")
    print()
    try:
        for setup in filter(None, args.setups.split(",")):
            if setup == "embedded":
                cwd = os.path.join(root, "embedded")
                os.makedirs(cwd)
                server = s.Gitstate(args.gitstate, team_args(), env, cwd, log="serve.log", wait="health")
                servers.append(server)
                caller = Caller(server.port)
                run_setup(args, "embedded repository", lambda _op: caller)
            elif setup == "remote":
                remote = Remote(args, os.path.join(root, "remote"), env, servers)
                caller = Caller(remote.process().port)
                run_setup(args, "remote repository (smart HTTP), one warm process", lambda _op: caller,
                          remote.counted)
            elif setup == "remote-cold":
                remote = Remote(args, os.path.join(root, "remote-cold"), env, servers)
                run_setup(args, "remote repository (smart HTTP), a fresh process for each operation",
                          remote.fresh_per_operation(), remote.counted, cycles=1)
            else:
                raise SystemExit(f"unknown setup {setup!r}: embedded, remote or remote-cold")
        if args.list:
            list_table(args, root, env, servers)
    finally:
        for server in reversed(servers):
            server.stop()
        s.remove_root(root)
    return 0
