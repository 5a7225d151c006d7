"""Write throughput of many writers into one repository through a slow network (issue 17).

Setup: lighttpd + `git http-backend` (CGI, basic auth; benchlib.support's helpers) serving one
bare repository (built by `scripts/bench scaling`'s `build_repo`), behind
scripts/latency-proxy.py, which delays every chunk by --delay-ms each way. Everything that talks
git goes through the proxy: the gitstate servers and the git CLI baseline.

1. The single-pusher ceiling: `git push` of a one-file commit from a depth-1 clone, through the
   proxy, --push-runs times (median). 1 / that latency is what one pusher at a time can reach.
2. For each P of --processes: P `gitstate serve` processes (each its own --cache-dir) and W =
   --writers threads (or W per process with --per-process), assigned to the processes round
   robin, each POSTing increasing serials of its own state (one kept-alive connection each),
   --writes-total POSTs in all, started on a barrier. A 503 is sent again, as Terraform does
   (`retry_max`); every non-2xx answer is counted.
   Checked after each run, from the bare repository with the git CLI: the branch gained exactly
   one commit per answered write, each write's commit message (`Update PATH (serial N) by ...`) is
   there once, and every state ends at its last serial.

Reports writes/s, its ratio to the ceiling, p50/p99/max latency, lost writes, non-2xx.

With --profile the servers log each round of their write queue and each write's answer (debug
events `round` and `write answered` of gitstate_git::batch), and a second table says where the
timed writes' time went: rounds led, lost and followed, their fetch and push time, the courtesy
waits, and per write its time in the queue, its rounds and when it was published.

Usage: scripts/bench write-queue [--processes 1,4,8,16] [--writers 32] [--per-process]
           [--writes-total 256] [--delay-ms 30] [--gitstate PATH] [--label NAME] [--profile]
"""

import http.client
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time

from benchlib import support as s
from benchlib.benches import scaling


def git_push_latency(root, remote, runs):
    """Milliseconds of `git push` of a one-file commit through the proxy, `runs` times."""
    work = os.path.join(root, "cli-clone")
    auth = s.with_credentials(remote)
    s.git("clone", "-q", "--depth", "1", "-b", "main", auth, work)
    samples = []
    for i in range(runs):
        with open(os.path.join(work, "cli-push.tfstate"), "w") as f:
            f.write(json.dumps({"version": 4, "serial": i + 1, "lineage": "cli"}))
        s.git("add", "-A", cwd=work)
        s.git("-c", "user.name=bench", "-c", "user.email=b@b", "commit", "-qm", f"cli push {i}", cwd=work)
        start = time.perf_counter()
        s.git("push", "-q", "origin", "HEAD:main", cwd=work)
        samples.append((time.perf_counter() - start) * 1000)
    shutil.rmtree(work)
    return samples


def rev_count(bare):
    """Commits on main."""
    return int(s.git("--git-dir", bare, "rev-list", "--count", "main").decode())


def check_branch(bare, before_tip, expected):
    """Lost writes: answered (path, serial) pairs without exactly one commit, plus commits that
    are not one answered write. Returns (lost, extra, wrong_final)."""
    subjects = s.git("--git-dir", bare, "log", "--format=%s", f"{before_tip}..main").decode().splitlines()
    seen = {}
    for subject in subjects:
        m = re.match(r"Update (\S+) \(serial (\d+)\) by ", subject)
        if m:
            key = (m.group(1), int(m.group(2)))
            seen[key] = seen.get(key, 0) + 1
    lost = sum(1 for key in expected if seen.get(key, 0) != 1)
    extra = len(subjects) - sum(min(1, seen.get(key, 0)) for key in expected)
    finals = {}
    for path, serial in expected:
        finals[path] = max(finals.get(path, 0), serial)
    wrong = 0
    for path, serial in finals.items():
        stored = json.loads(s.git("--git-dir", bare, "show", f"main:{path}"))
        if stored["serial"] != serial:
            wrong += 1
    return lost, extra, wrong


def measure(args, root, remote, bare, processes, writers):
    """One cell: `processes` servers, `writers` writer threads; the row's numbers."""
    cache_root = tempfile.mkdtemp(prefix="cache-", dir=root)
    env = {"GITSTATE_WRITE_BUDGET_SECONDS": str(args.budget)} if args.budget else {}
    if args.profile:
        env["RUST_LOG"] = "info,gitstate_git::batch=debug"
    servers = [scaling.start_server(args.gitstate, root, f"q-{processes}-{writers}-{k}",
                              ["--repository", f"default={remote}", "--cache-dir", os.path.join(cache_root, str(k))],
                              env=env)
               for k in range(processes)]
    per_writer = max(2, -(-args.writes_total // writers))
    tag = f"{args.label}-{processes}x{writers}"
    try:
        conns = [http.client.HTTPConnection("127.0.0.1", servers[w % processes].port, timeout=600)
                 for w in range(writers)]
        paths = [f"q/{tag}/w{w:04d}.tfstate" for w in range(writers)]
        # Create each state and warm each server's cache, a few at a time (untimed).
        warm_errors = []

        def warm(w):
            try:
                s.timed_request(conns[w], "POST", f"/state/default/{paths[w]}",
                                      scaling.state_json(w, 1, args.state_bytes), busy=[])
            except BaseException as e:  # noqa: BLE001
                warm_errors.append(str(e))
        for start in range(0, writers, 16):
            ts = [threading.Thread(target=warm, args=(w,)) for w in range(start, min(writers, start + 16))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        if warm_errors:
            raise SystemExit("; ".join(warm_errors[:3]))
        before_tip = s.git("--git-dir", bare, "rev-parse", "main").decode().strip()
        before = rev_count(bare)
        latencies = [[] for _ in range(writers)]
        statuses, errors, requests = [], [], []
        barrier = threading.Barrier(writers + 1)

        def writer(w):
            bodies = [scaling.state_json(w, serial, args.state_bytes) for serial in range(2, per_writer + 2)]
            barrier.wait()
            for body in bodies:
                start = time.perf_counter()
                try:
                    while True:
                        sent = time.perf_counter()
                        conns[w].request("POST", f"/state/default/{paths[w]}", body=body,
                                         headers={"Content-Type": "application/json"})
                        response = conns[w].getresponse()
                        data = response.read()
                        requests.append((time.perf_counter() - sent) * 1000)
                        if response.status == 200:
                            break
                        statuses.append((response.status, data[:200]))
                        if response.status < 500 or response.status == 501:
                            raise RuntimeError(f"{response.status} {data[:200]!r}")
                        time.sleep(float(response.getheader("Retry-After") or 1) if args.honour_retry_after else 0)
                except BaseException as e:  # noqa: BLE001 (reported below)
                    errors.append(f"writer {w}: {e}")
                    return
                latencies[w].append((time.perf_counter() - start) * 1000)

        settle = 1.5 if args.access_log else 0  # lighttpd writes its access log about once a second
        time.sleep(settle)
        timed_from, cpu_from, logged_from = time.time(), cpu_times(), git_requests(args.access_log)
        wall = s.run_together(writer, writers, barrier)
        timed_to, cpu_to = time.time(), cpu_times()
        time.sleep(settle)
        logged_to = git_requests(args.access_log)
        expected = [(paths[w], serial) for w in range(writers) for serial in range(2, 2 + len(latencies[w]))]
        commits = rev_count(bare) - before
        lost, extra, wrong = check_branch(bare, before_tip, expected)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(cache_root, ignore_errors=True)
    answered = sum(len(x) for x in latencies)
    all_lat = [x for lat in latencies for x in lat]
    return {"processes": processes, "writers": writers, "writes": writers * per_writer, "answered": answered,
            "wall": wall, "lat": all_lat, "commits": commits, "lost": lost, "extra": extra, "wrong": wrong,
            "non2xx": len(statuses), "codes": sorted({code for code, _ in statuses}), "errors": errors,
            "samples": [d for _, d in statuses[:2]], "longest_request": max(requests, default=0),
            "cpu_busy": 1 - (cpu_to[1] - cpu_from[1]) / max(1, cpu_to[0] - cpu_from[0]),
            "git_requests": {kind: logged_to.get(kind, 0) - logged_from.get(kind, 0) for kind in logged_to},
            "profile": profile([server.log_path for server in servers], timed_from, timed_to, wall)
            if args.profile else None}


def git_requests(access_log):
    """Requests the git server has answered so far, by kind (advertisement or request, per
    service), from lighttpd's access log ({} without one)."""
    counts = {}
    if not access_log or not os.path.exists(access_log):
        return counts
    with open(access_log, encoding="utf-8", errors="replace") as f:
        for line in f:
            method, url = (line.split() + ["", ""])[:2]
            if "info/refs" in url:
                kind = "advert " + url.rsplit("service=", 1)[-1].replace("git-", "")
            else:
                kind = f"{method} " + url.rsplit("/", 1)[-1].replace("git-", "")
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def cpu_times():
    """(all, idle) jiffies of the machine's CPUs, from /proc/stat: the share of time the
    machine was busy during a cell (the servers, the git server's processes, the proxy and the
    writers all run here)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def per_write(row):
    """The git server's requests per answered write, by kind, e.g. `4.1 (advert receive-pack 1.9, ...)`."""
    requests = row["git_requests"]
    answered = max(1, row["answered"])
    parts = ", ".join(f"{kind} {count / answered:.1f}" for kind, count in sorted(requests.items()) if count)
    return f"{sum(requests.values()) / answered:.1f} ({parts})"


def timed_events(log_paths, since, until):
    """The JSON log events of `log_paths` stamped within [since, until] (unix seconds)."""
    from datetime import datetime
    for path in log_paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
                if since <= at <= until:
                    yield event["fields"]


def profile(log_paths, since, until, wall):
    """Where the timed writes' time went, from the servers' `round`, `write answered` and
    `request handled` events."""
    rounds, answers, requests = [], [], []
    for fields in timed_events(log_paths, since, until):
        message = fields.get("message")
        if message == "round":
            rounds.append(fields)
        elif message == "write answered":
            answers.append(fields)
        elif message == "request handled" and fields.get("status") == 200:
            requests.append(float(fields["duration_ms"]))

    def mean(values):
        values = list(values)
        return statistics.mean(values) if values else 0.0
    led = [r for r in rounds if r["led"] and not r["lost"]]
    lost = [r for r in rounds if r["led"] and r["lost"]]
    followed = [r for r in rounds if not r["led"]]
    published = [a for a in answers if a.get("published_ms") is not None]
    return {
        "pushes_per_s": len(led) / wall, "led": len(led), "lost": len(lost), "followed": len(followed),
        "writes_per_push": mean(r["writes"] + r.get("folded", 0) for r in led),
        "lead_ms": mean(r["round_ms"] for r in led), "lead_fetch_ms": mean(r["fetch_ms"] for r in led),
        "lead_push_ms": mean(r["push_ms"] for r in led), "follow_ms": mean(r["round_ms"] for r in followed),
        "courtesy_ms": sum(r["courtesy_ms"] for r in rounds) / max(1, len(rounds)),
        "request_ms": mean(requests), "queued_ms": mean(a["queued_ms"] for a in answers),
        "rounds_per_write": mean(a["rounds"] for a in answers),
        "published_share": len(published) / max(1, len(answers)),
        "published_after_ms": mean(a["published_ms"] for a in published),
    }


def add_arguments(parser):
    """The process and writer counts, the load, the proxy's delay, --gitstate, --label."""
    parser.add_argument("--processes", default="1,4,8,16")
    parser.add_argument("--writers", default="32", help="writer threads in all (per process with --per-process); "
                                                        "a list is run for each process count")
    parser.add_argument("--per-process", action="store_true")
    parser.add_argument("--writes-total", type=int, default=256)
    parser.add_argument("--state-bytes", type=int, default=2048)
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--push-runs", type=int, default=10)
    parser.add_argument("--no-filter", action="store_true",
                        help="leave uploadpack.allowFilter off (no partial fetch, no cross-process queue)")
    parser.add_argument("--budget", type=float, default=0, help="GITSTATE_WRITE_BUDGET_SECONDS for the servers "
                                                                "(0: their default)")
    parser.add_argument("--honour-retry-after", action="store_true",
                        help="sleep Retry-After before resending a 503 (Terraform's client does not)")
    s.add_gitstate_argument(parser)
    parser.add_argument("--label", default="run")
    parser.add_argument("--profile", action="store_true",
                        help="log the write queue's rounds and answers (debug) and print where the time went")


def run(args):
    """The push ceiling, then every (processes, writers) cell; the table."""
    s.require_lighttpd()
    process_counts = s.int_list(args.processes)
    writer_counts = s.int_list(args.writers)

    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="gitstate-bench-queue-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    bare = os.path.join(repos, "queue.git")
    scaling.build_repo(bare, 100, 50, args.state_bytes)
    if not args.no_filter:
        # As GitHub and GitLab offer it: reads fetch partially, and the cross-process write
        # queue (DESIGN §9.4), which fetches pending writes by id, is on.
        s.git("config", "uploadpack.allowFilter", "true", cwd=bare)
    http_port = s.free_port()
    access_log = os.path.join(root, "access.log") if args.profile else None
    lighttpd = s.start_lighttpd(root, repos, http_port, access_log)
    args.access_log = access_log
    proxy, proxy_port = s.start_latency_proxy(root, http_port, args.delay_ms)
    remote = f"http://127.0.0.1:{proxy_port}/git/queue.git"
    rows = []
    try:
        pushes = git_push_latency(root, remote, args.push_runs)
        push_ms = statistics.median(pushes)
        ceiling = 1000 / push_ms
        print(f"  git push through the proxy: median {push_ms:.0f} ms ({min(pushes):.0f}–{max(pushes):.0f}); "
              f"ceiling {ceiling:.2f} writes/s", file=sys.stderr)
        for processes in process_counts:
            for w in writer_counts:
                writers = w * processes if args.per_process else w
                row = measure(args, root, remote, bare, processes, writers)
                rows.append(row)
                lat = row["lat"] or [0]
                print(f"  {processes} x {writers}: {row['answered'] / row['wall']:.2f} writes/s "
                      f"({row['answered'] / row['wall'] / ceiling:.1f}x), p50 {s.percentile(lat, 50):.0f} ms, "
                      f"p99 {s.percentile(lat, 99):.0f} ms, lost {row['lost']}, non-2xx {row['non2xx']} "
                      f"{row['codes']} {row['samples'][:1]}, errors {row['errors'][:2]}", file=sys.stderr)
    finally:
        s.stop(proxy)
        s.stop(lighttpd)
        s.remove_root(root, bool(os.environ.get("BENCH_KEEP")), " (BENCH_KEEP)")

    print(f"{args.label}: lighttpd + git http-backend behind a proxy adding {args.delay_ms:g} ms per chunk each way; "
          f"{os.cpu_count()} cores; states of {args.state_bytes} bytes; load average (1 min) {load_before[0]:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after")
    print()
    print(f"git CLI push through the proxy: median {push_ms:.0f} ms ({min(pushes):.0f}–{max(pushes):.0f}), "
          f"{args.push_runs} runs: single-pusher ceiling {ceiling:.2f} writes/s")
    print()
    print("Latency of a write: from its first request to its 200, 503 resends included; longest request: "
          "the longest single HTTP request (bounded by the write budget).")
    print()
    print("| processes | writers | writes answered | writes/s | × ceiling | p50 ms | p99 ms | max ms | "
          "longest request ms | commits / writes | lost | non-2xx (codes) | CPU busy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["lat"] or [0]
        rate = r["answered"] / r["wall"]
        print(f"| {r['processes']} | {r['writers']} | {r['answered']} / {r['writes']} | {rate:.1f} | "
              f"{rate / ceiling:.1f}× | {s.percentile(lat, 50):.0f} | {s.percentile(lat, 99):.0f} | "
              f"{max(lat):.0f} | {r['longest_request']:.0f} | {r['commits']} / {r['answered']} | {r['lost'] + r['wrong']} | "
              f"{r['non2xx']} {tuple(r['codes']) or ''} | {r['cpu_busy']:.0%} |")
    if args.profile:
        print()
        print("Where the time went (timed writes only; from the servers' debug events `round` and `write answered`): "
              "pushes/s = rounds that moved the branch; writes/push = the leader's own and those it folded; lead ms = such a round, of it fetch (pending writes, "
              "another process's tip) and push; follow ms = a round that published or looked for answers; "
              "courtesy = the wait before a round (mean); request = a 200 POST; queue = its time in the write "
              "queue; published = share of writes that went through the remote's queue, and after how long.")
        print()
        print("| processes | pushes/s | writes/push | rounds led / lost / followed | lead ms (fetch, push) | "
              "follow ms | courtesy ms | request ms | queue ms | rounds/write | published (after ms) | "
              "git requests per write |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            p = r["profile"]
            print(f"| {r['processes']} | {p['pushes_per_s']:.1f} | {p['writes_per_push']:.1f} | "
                  f"{p['led']} / {p['lost']} / {p['followed']} | {p['lead_ms']:.0f} ({p['lead_fetch_ms']:.0f}, "
                  f"{p['lead_push_ms']:.0f}) | {p['follow_ms']:.0f} | {p['courtesy_ms']:.0f} | {p['request_ms']:.0f} | "
                  f"{p['queued_ms']:.0f} | {p['rounds_per_write']:.1f} | {p['published_share']:.0%} "
                  f"({p['published_after_ms']:.0f}) | {per_write(r)} |")
