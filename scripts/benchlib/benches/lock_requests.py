"""Git requests and bytes per LOCK and the GET after it, cold and warm (issue 55: the nested-path
check of a LOCK).

Setup: lighttpd + `git http-backend` (CGI, basic auth, partial fetch on), one repository of
--states small states in --folders folders (`envs/fNN/sNNNNN.tfstate`) and `root.tfstate`, seeded
with `git fast-import`; gitstate reaches it through scripts/latency-proxy.py (no delay), which
counts the bytes, and a CGI wrapper logs each request that reaches `git http-backend`. For each path of --paths:

  first          a fresh `gitstate serve` (empty cache): Terraform's cycle (LOCK, GET, POST with
                 the lock's ID, UNLOCK);
  warm           the same cycle again in that process;
  cold-processes one fresh `gitstate serve` per operation of the cycle: every operation pays
                 its process's first contact;
  moved branch   in a warm process, another process writes another state, then LOCK and GET.

Usage: scripts/bench lock-requests [--states 20000] [--folders 100]
                                   [--paths envs/f03/s00003.tfstate,root.tfstate] [--gitstate PATH]
Prints one markdown table: requests and bytes (up + down) per operation.
"""
import os
import tempfile

from benchlib import support as s

REPO = "states.git"


def add_arguments(parser):
    """--states, --folders, --paths, --gitstate."""
    parser.add_argument("--states", type=int, default=20000)
    parser.add_argument("--folders", type=int, default=100)
    parser.add_argument("--paths", default="envs/f03/s00003.tfstate,root.tfstate")
    s.add_gitstate_argument(parser)


class Counted:
    """The requests that reached `git http-backend` (a CGI wrapper logs each before its answer)
    and the proxy's byte counters, read around each operation."""

    def __init__(self, request_log, proxy):
        self.request_log, self.proxy = request_log, proxy

    def requests(self):
        """Requests logged so far."""
        if not os.path.exists(self.request_log):
            return 0
        with open(self.request_log, "rb") as f:
            return sum(1 for _ in f)

    def measure(self, send):
        """(requests, bytes) of what `send()` makes the git server see."""
        (up, down, _), before = self.proxy.totals(settle=0.3), self.requests()
        send()
        (up2, down2, _), after = self.proxy.totals(settle=0.3), self.requests()
        return after - before, (up2 - up) + (down2 - down)


def run(args):
    """Prints the table."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-lock-requests-")
    servers = []
    try:
        request_log = os.path.join(root, "requests.log")
        githttp = s.GitHttp(root, request_log=request_log)
        servers.append(githttp)
        repo = s.init_bare(os.path.join(githttp.repos, REPO), allow_filter=True)
        files = [(f"envs/f{i % args.folders:02}/s{i:05}.tfstate", s.state_body(1, 200))
                 for i in range(args.states)]
        s.fast_import(repo, files + [("root.tfstate", s.state_body(1, 200))])
        proxy = s.LatencyProxy(root, githttp.port)
        servers.append(proxy)
        counted = Counted(request_log, proxy)
        env = s.git_credentials_env("warn")
        url = proxy.url(f"/git/{REPO}")

        def process(name):
            cache = os.path.join(root, f"cache-{name}")
            server = s.Gitstate(args.gitstate, ["--repository", f"default={url}", "--cache-dir", cache],
                                env, root, log=f"{name}.log", wait="health")
            servers.append(server)
            return server

        print(f"{args.states} states in {args.folders} folders, smart HTTP; requests, bytes (up + down)")
        s.table_header("path", "operation", "requests", "bytes")
        serial = 1
        for n, path in enumerate(args.paths.split(",")):
            address = f"/state/default/{path}"

            def row(what, server, method, target=address, body=None):
                client = server.client()
                count, size = counted.measure(lambda: client.request(method, target, body))
                s.table_row(path, what, count, s.byte_size(size))

            def cycle(label, servers_of):
                nonlocal serial
                serial += 1
                lock = s.lock_body(f"{label}-{serial}")
                row(f"{label} LOCK", servers_of("lock"), "LOCK", body=lock)
                row(f"{label} GET", servers_of("get"), "GET")
                row(f"{label} POST ?ID=", servers_of("post"), "POST",
                    f"{address}?ID={label}-{serial}", s.state_body(serial, 200))
                row(f"{label} UNLOCK", servers_of("unlock"), "UNLOCK", body=lock)

            one = process(f"same-{n}")
            cycle("first", lambda _: one)
            cycle("warm", lambda _: one)
            cycle("cold-processes", lambda op: process(f"cold-{n}-{op}"))
            other = process(f"other-{n}")
            other.client().request("POST", "/state/default/elsewhere.tfstate", s.state_body(serial, 200))
            lock = s.lock_body(f"moved-{n}")
            row("moved branch: LOCK", one, "LOCK", body=lock)
            row("moved branch: GET", one, "GET")
            one.client().request("UNLOCK", address, lock)
    finally:
        for server in reversed(servers):
            server.stop()
        s.remove_root(root)
