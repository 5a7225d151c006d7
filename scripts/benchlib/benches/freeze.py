"""Lambda's freeze: containers frozen between invocations, then thawed or discarded (issue 33).

The twin of tests/tests/freeze.rs, with a slow network. Setup as `scripts/bench write-queue`:
lighttpd + `git http-backend` serving one repository (uploadpack.allowFilter on: the write queue
is on) behind scripts/latency-proxy.py (--delay-ms per chunk each way). --processes `gitstate
serve` processes are the containers, each with its own cache. --writers threads each POST their
own state --writes times; like invocations, a write takes a free container (one request at a
time per container) and, after its answer, the container is frozen (SIGSTOP) with probability
--freeze for a random --pause-ms range, then thawed (SIGCONT) or, one time in --discard-every,
killed and replaced by a new process; otherwise it is free again at once. A 503 is sent again
(as Terraform does); every non-2xx is counted.

Checked from the bare repository afterwards: every answered write is exactly one commit, every
state ends at its last serial, no pending write is left in the queue.

Reports writes/s, p50/p99/max, non-2xx, lost, freezes and discards, and the connections the
servers renewed (`gitstate_git_connections_renewed_total`, read from the servers still up).

Usage: scripts/bench freeze [--processes 8] [--writers 16] [--writes 20] [--freeze 0.4]
           [--pause-ms 500,4000] [--discard-every 5] [--delay-ms 30] [--gitstate PATH]
"""

import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from benchlib import support as s
from benchlib.benches import scaling, write_queue


def add_arguments(parser):
    """Containers, writers, writes, the freezes, the network's delay, --gitstate."""
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--writes", type=int, default=20, help="writes per writer")
    parser.add_argument("--freeze", type=float, default=0.4, help="probability a container is frozen after a write")
    parser.add_argument("--pause-ms", default="500,4000", help="range of a freeze, ms")
    parser.add_argument("--discard-every", type=int, default=5, help="one freeze in N ends with a kill")
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--state-bytes", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=33)
    s.add_gitstate_argument(parser)


def renewed(port):
    """`gitstate_git_connections_renewed_total` of the server on `port`, 0 when absent."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/_/metrics", timeout=5).read().decode()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("gitstate_git_connections_renewed_total "):
            return float(line.split()[1])
    return 0


def run(args):
    """One run; the table."""
    s.require_lighttpd()
    pause = s.int_list(args.pause_ms)
    root = tempfile.mkdtemp(prefix="gitstate-bench-freeze-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    bare = os.path.join(repos, "freeze.git")
    scaling.build_repo(bare, 10, 10, args.state_bytes)
    s.git("config", "uploadpack.allowFilter", "true", cwd=bare)
    http_port = s.free_port()
    lighttpd = s.start_lighttpd(root, repos, http_port)
    proxy, proxy_port = s.start_latency_proxy(root, http_port, args.delay_ms)
    remote = f"http://127.0.0.1:{proxy_port}/git/freeze.git"
    counter = [0]

    def container():
        counter[0] += 1
        return scaling.start_server(args.gitstate, root, f"c{counter[0]}",
                                    ["--repository", f"default={remote}",
                                     "--cache-dir", os.path.join(root, f"cache-{counter[0]}")])

    servers = [container() for _ in range(args.processes)]
    free = list(range(args.processes))
    cond = threading.Condition()
    stats = {"freezes": 0, "discards": 0}
    latencies, statuses, errors, expected = [], [], [], []
    before_tip = s.git("--git-dir", bare, "rev-parse", "main").decode().strip()
    rng = random.Random(args.seed)
    lock = threading.Lock()

    def thaw(at, pid, ms, discard):
        time.sleep(ms / 1000)
        if discard:
            os.kill(pid, signal.SIGKILL)
            fresh = container()
            with cond:
                servers[at] = fresh
        else:
            os.kill(pid, signal.SIGCONT)
        with cond:
            free.insert(0, at)
            cond.notify()

    def writer(w):
        path = f"freeze/w{w:03d}.tfstate"
        for serial in range(1, args.writes + 1):
            with cond:
                while not free:
                    cond.wait()
                at = free.pop()
                server = servers[at]
            body = scaling.state_json(w, serial, args.state_bytes)
            start = time.perf_counter()
            try:
                while True:
                    data = body.encode() if isinstance(body, str) else body
                    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/state/default/{path}",
                                                     data=data, method="POST", headers=s.JSON)
                    try:
                        urllib.request.urlopen(request, timeout=120).read()
                        break
                    except urllib.error.HTTPError as e:
                        statuses.append((e.code, e.read()[:200]))
                        if e.code < 500 or e.code == 501:
                            raise
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(f"writer {w} serial {serial}: {e}")
                with cond:
                    free.insert(0, at)
                    cond.notify()
                return
            with lock:
                latencies.append((time.perf_counter() - start) * 1000)
                expected.append((path, serial))
                roll = rng.random()
                ms = rng.randint(pause[0], pause[1])
                discard = rng.randrange(args.discard_every) == 0
            if roll < args.freeze:
                os.kill(server.pid, signal.SIGSTOP)
                with lock:
                    stats["freezes"] += 1
                    stats["discards"] += discard
                threading.Thread(target=thaw, args=(at, server.pid, ms, discard)).start()
            else:
                with cond:
                    free.insert(0, at)
                    cond.notify()

    load_before = os.getloadavg()
    started = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(args.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    time.sleep(pause[1] / 1000 + 1)
    try:
        lost, extra, wrong = write_queue.check_branch(bare, before_tip, expected)
        pending = [r for r in s.git("--git-dir", bare, "for-each-ref", "--format=%(refname)",
                                    "refs/gitstate/queue/").decode().split() if "/pending/" in r]
        renewals = sum(renewed(server.port) for server in servers)
    finally:
        for server in servers:
            try:
                os.kill(server.pid, signal.SIGCONT)
            except OSError:
                pass
            server.stop()
        s.stop(proxy)
        s.stop(lighttpd)
        s.remove_root(root, bool(os.environ.get("BENCH_KEEP")), " (BENCH_KEEP)")
    print(f"lighttpd + git http-backend behind a proxy adding {args.delay_ms:g} ms per chunk each way; "
          f"{os.cpu_count()} cores; {args.processes} containers, {args.writers} writers × {args.writes} writes; "
          f"freeze probability {args.freeze}, pauses {pause[0]}–{pause[1]} ms, one in {args.discard_every} discarded; "
          f"load average (1 min) {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print()
    print("| writes answered | writes/s | p50 ms | p99 ms | max ms | non-2xx (codes) | lost | pending left | "
          "freezes (discarded) | connections renewed (servers up at the end) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    lat = latencies or [0]
    codes = sorted({c for c, _ in statuses})
    print(f"| {len(latencies)} / {args.writers * args.writes} | {len(latencies) / wall:.1f} | "
          f"{s.percentile(lat, 50):.0f} | {s.percentile(lat, 99):.0f} | {max(lat):.0f} | "
          f"{len(statuses)} {tuple(codes) or ''} | {lost + wrong} | {len(pending)} | "
          f"{stats['freezes']} ({stats['discards']}) | {renewals:.0f} |")
    if errors:
        print(f"\nerrors: {errors[:3]}", file=sys.stderr)
    return 1 if errors or statuses or lost or wrong or pending else 0
