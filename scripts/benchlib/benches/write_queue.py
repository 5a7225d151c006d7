"""Write throughput of many writers into one repository through a slow network (issue 17).

Setup: lighttpd + `git http-backend` (CGI, basic auth; benchlib.support's helpers) serving one
bare repository (built by `scripts/bench scaling`'s `build_repo`, or with --states N one of N
existing states, see below), behind scripts/latency-proxy.py, which delays every chunk by
--delay-ms each way (and with --rate-mbps limits each connection, each direction, to that many
megabytes per second) and counts the bytes it forwards. Everything that talks git goes through
the proxy: the gitstate servers and the git CLI baseline.

1. The single-pusher ceiling: `git push` of a one-file commit from a depth-1 blobless clone
   (the commit made with plumbing, not timed), through the proxy, --push-runs times (median).
   1 / that latency is what one pusher at a time can reach.
2. For each P of --processes: P `gitstate serve` processes (each its own, empty --cache-dir) and
   W = --writers threads (or W per process with --per-process), each POSTing increasing serials
   of its own state, --writes-total POSTs in all, started on a barrier. A 503 is sent again, as
   Terraform does (`retry_max`); every non-2xx answer is counted.
   Checked after each run, from the bare repository with the git CLI: the branch gained exactly
   one commit per answered write, each write's commit message (`Update PATH (serial N) by ...`) is
   there once, and every state ends at its last serial.

The default is the best case: warm and sticky. Warm: before the timed run each writer POSTs its
state once (untimed), which creates it and warms its process's cache; sticky (--route sticky):
writer w always talks to process w % P over one kept-alive connection. The workload's options:

  --cold          no warm-up: each process starts with an empty --cache-dir right before the
                  timed run (as a new Lambda container), and the first POST of a writer is a
                  write of an existing state (in today's repository the writers' states are
                  added at serial 1 with git fast-import first, untimed, not through gitstate).
  --route any     write k of writer w goes to process (w + k) % P (no stickiness), over one
                  kept-alive connection per (writer, process) pair, opened on first use.
  --states N      the repository holds N existing states of about 1 KiB at serial 1 in one
                  commit (`scripts/bench many-states`' seed): --layout folders puts them in
                  --folders folders (`fNNN/sNNNNNN.tfstate`), flat in one; writer w writes state
                  w (spread over the folders), same lineage, serials from 2 (3 when warm: the
                  warm-up wrote 2), continuing across cells.
  --rate-mbps X   the proxy's rate limit per connection and direction (12.5 = 100 Mbit/s).

Reports writes/s, its ratio to the ceiling, p50/p99/max latency, lost writes, non-2xx, and the
bytes through the proxy per answered write, up (to the git server) and down, from the barrier's
release until nothing has moved for a second after the last answer.

With --profile the servers log each round of their write queue and each write's answer (debug
events `round` and `write answered` of gitstate_git::batch), and a second table says where the
timed writes' time went: rounds led, lost and followed, their fetch and push time, the courtesy
waits, and per write its time in the queue, its rounds and when it was published.

Usage: scripts/bench write-queue [--processes 1,4,8,16] [--writers 32] [--per-process]
           [--writes-total 256] [--delay-ms 30] [--rate-mbps 0] [--cold] [--route sticky|any]
           [--states N [--layout folders|flat] [--folders 100]] [--gitstate PATH] [--label NAME]
           [--profile]
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
from benchlib.benches import many_states, scaling


def git_push_latency(root, remote, runs):
    """Milliseconds of `git push` of a one-file commit through the proxy, `runs` times (the
    commit made with plumbing in a depth-1 blobless bare clone: a repository of many states is
    not checked out)."""
    work = os.path.join(root, "cli-clone")
    s.git("clone", "-q", "--bare", "--depth", "1", "--filter=blob:none", "--no-tags", "-b", "main",
          s.with_credentials(remote), work)
    samples = []
    for i in range(runs):
        body = json.dumps({"version": 4, "serial": i + 1, "lineage": "cli"}).encode()
        commit = s.commit_file(work, "main", "cli-push.tfstate", body, f"cli push {i}")
        start = time.perf_counter()
        s.git("push", "-q", "origin", f"{commit}:refs/heads/main", cwd=work)
        samples.append((time.perf_counter() - start) * 1000)
        s.git("update-ref", "refs/heads/main", commit, cwd=work)
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


def writer_states(args, tag, writers):
    """(paths, body) of the cell's writers: writer w's state path and body(w, serial)."""
    if args.states:
        return ([many_states.state_path(w, args.layout, args.folders) for w in range(writers)],
                lambda w, serial: many_states.state(w, serial, args.state_bytes))
    return ([f"q/{tag}/w{w:04d}.tfstate" for w in range(writers)],
            lambda w, serial: scaling.state_json(w, serial, args.state_bytes))


def measure(args, root, remote, bare, proxy, serials, processes, writers):
    """One cell: `processes` servers, `writers` writer threads; the row's numbers. `serials`:
    each state's serial in the repository (path -> serial; absent: no such state), kept up to
    date across cells."""
    per_writer = max(2, -(-args.writes_total // writers))
    tag = f"{args.label}-{processes}x{writers}"
    paths, body = writer_states(args, tag, writers)
    if args.cold:
        # The writers' states exist before the run, added without gitstate (untimed).
        missing = [(w, path) for w, path in enumerate(paths) if path not in serials]
        if missing:
            s.fast_import(bare, [(path, body(w, 1)) for w, path in missing], b"writers' states", on_main=True)
            serials.update((path, 1) for _, path in missing)
    cache_root = tempfile.mkdtemp(prefix="cache-", dir=root)
    env = {"GITSTATE_WRITE_BUDGET_SECONDS": str(args.budget)} if args.budget else {}
    if args.profile:
        env["RUST_LOG"] = "info,gitstate_git::batch=debug"
    servers = [scaling.start_server(args.gitstate, root, f"q-{processes}-{writers}-{k}",
                              ["--repository", f"default={remote}", "--cache-dir", os.path.join(cache_root, str(k))],
                              env=env)
               for k in range(processes)]
    try:
        # One kept-alive connection per (writer, process) pair, opened on first use: sticky
        # writers use one each.
        conns = [{} for _ in range(writers)]

        def conn(w, k):
            """Writer w's connection for its write k (the warm-up is k = 0 too)."""
            process = w % processes if args.route == "sticky" else (w + k) % processes
            if process not in conns[w]:
                conns[w][process] = http.client.HTTPConnection("127.0.0.1", servers[process].port, timeout=600)
            return conns[w][process]
        if not args.cold:
            # Create each state (or write it once more) and warm each server's cache, a few at a
            # time (untimed).
            warm_errors = []

            def warm(w):
                try:
                    s.timed_request(conn(w, 0), "POST", f"/state/default/{paths[w]}",
                                    body(w, serials.get(paths[w], 0) + 1), busy=[])
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
            for path in paths:
                serials[path] = serials.get(path, 0) + 1
        first = [serials[path] + 1 for path in paths]  # each writer's first timed serial
        before_tip = s.git("--git-dir", bare, "rev-parse", "main").decode().strip()
        before = rev_count(bare)
        latencies = [[] for _ in range(writers)]
        statuses, errors, requests = [], [], []
        barrier = threading.Barrier(writers + 1)

        def writer(w):
            bodies = [body(w, serial) for serial in range(first[w], first[w] + per_writer)]
            barrier.wait()
            for k, data in enumerate(bodies):
                start = time.perf_counter()
                try:
                    while True:
                        sent = time.perf_counter()
                        c = conn(w, k)
                        c.request("POST", f"/state/default/{paths[w]}", body=data,
                                  headers={"Content-Type": "application/json"})
                        response = c.getresponse()
                        answer = response.read()
                        requests.append((time.perf_counter() - sent) * 1000)
                        if response.status == 200:
                            break
                        statuses.append((response.status, answer[:200]))
                        if response.status < 500 or response.status == 501:
                            raise RuntimeError(f"{response.status} {answer[:200]!r}")
                        time.sleep(float(response.getheader("Retry-After") or 1) if args.honour_retry_after else 0)
                except BaseException as e:  # noqa: BLE001 (reported below)
                    errors.append(f"writer {w}: {e}")
                    return
                latencies[w].append((time.perf_counter() - start) * 1000)

        settle = 1.5 if args.access_log else 0  # lighttpd writes its access log about once a second
        time.sleep(settle)
        wire_from = proxy.totals(settle=0.5, timeout=10)
        timed_from, cpu_from, logged_from = time.time(), cpu_times(), git_requests(args.access_log)
        wall = s.run_together(writer, writers, barrier)
        timed_to, cpu_to = time.time(), cpu_times()
        wire_to = proxy.totals(settle=1.0, timeout=10)  # what the answers left to do (e.g. sweeps) counts
        time.sleep(max(0, settle - 1.0))
        logged_to = git_requests(args.access_log)
        expected = [(paths[w], serial) for w in range(writers)
                    for serial in range(first[w], first[w] + len(latencies[w]))]
        for w in range(writers):
            if latencies[w]:
                serials[paths[w]] = first[w] + len(latencies[w]) - 1
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
            "wire_up": wire_to[0] - wire_from[0], "wire_down": wire_to[1] - wire_from[1],
            "wire_connections": wire_to[2] - wire_from[2],
            "git_requests": {kind: logged_to.get(kind, 0) - logged_from.get(kind, 0) for kind in logged_to},
            "profile": profile([server.log_path for server in servers], timed_from, timed_to, wall)
            if args.profile else None}


def wire(row):
    """Bytes through the proxy per answered write, "up / down"."""
    answered = max(1, row["answered"])
    return f"{s.byte_size(row['wire_up'] / answered)} / {s.byte_size(row['wire_down'] / answered)}"


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
    parser.add_argument("--state-bytes", type=int, default=0,
                        help="bytes of a state (0: 2048, or 1024 with --states)")
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--rate-mbps", type=float, default=0.0,
                        help="the proxy's limit per connection and direction, megabytes/s (0: none)")
    parser.add_argument("--cold", action="store_true",
                        help="no warm-up: empty caches right before the timed run, existing states")
    parser.add_argument("--route", choices=("sticky", "any"), default="sticky",
                        help="sticky: writer w on process w %% P; any: its write k on process (w + k) %% P")
    parser.add_argument("--states", type=int, default=0,
                        help="a repository of this many existing states (0: scaling's, 50 states, 100 commits)")
    parser.add_argument("--layout", choices=("folders", "flat"), default="folders",
                        help="with --states: --folders folders, or one flat folder")
    parser.add_argument("--folders", type=int, default=100)
    parser.add_argument("--push-runs", type=int, default=10)
    parser.add_argument("--no-filter", action="store_true",
                        help="leave uploadpack.allowFilter off (no partial fetch; the queue fetches pending writes whole)")
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

    most_writers = max(process_counts) * max(writer_counts) if args.per_process else max(writer_counts)
    if args.states and most_writers > args.states:
        raise SystemExit(f"--states {args.states}: fewer states than the {most_writers} writers")
    args.state_bytes = args.state_bytes or (1024 if args.states else 2048)

    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="gitstate-bench-queue-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    bare = os.path.join(repos, "queue.git")
    serials = {}  # path -> its serial in the repository (the writers' states)
    if args.states:
        s.log(f"write-queue: seeding {args.states} states ({args.layout})")
        many_states.seed(bare, args.states, args.layout, args.folders, args.state_bytes)
        serials.update((many_states.state_path(i, args.layout, args.folders), 1) for i in range(most_writers))
        if args.no_filter:
            s.git("config", "--unset", "uploadpack.allowFilter", cwd=bare)
    else:
        scaling.build_repo(bare, 100, 50, args.state_bytes)
    if not args.no_filter:
        # As GitHub and GitLab offer it: reads fetch partially, and the cross-process write
        # queue (DESIGN §9.4), which fetches pending writes by id, is on.
        s.git("config", "uploadpack.allowFilter", "true", cwd=bare)
    http_port = s.free_port()
    access_log = os.path.join(root, "access.log") if args.profile else None
    lighttpd = s.start_lighttpd(root, repos, http_port, access_log)
    args.access_log = access_log
    proxy = s.LatencyProxy(root, http_port, args.delay_ms, args.rate_mbps)
    remote = proxy.url("/git/queue.git")
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
                row = measure(args, root, remote, bare, proxy, serials, processes, writers)
                rows.append(row)
                lat = row["lat"] or [0]
                print(f"  {processes} x {writers}: {row['answered'] / row['wall']:.2f} writes/s "
                      f"({row['answered'] / row['wall'] / ceiling:.1f}x), p50 {s.percentile(lat, 50):.0f} ms, "
                      f"p99 {s.percentile(lat, 99):.0f} ms, lost {row['lost']}, non-2xx {row['non2xx']} "
                      f"{row['codes']} {row['samples'][:1]}, errors {row['errors'][:2]}; bytes per write "
                      f"{wire(row)}", file=sys.stderr)
    finally:
        proxy.stop()
        s.stop(lighttpd)
        s.remove_root(root, bool(os.environ.get("BENCH_KEEP")), " (BENCH_KEEP)")

    rate = f", at most {args.rate_mbps:g} MB/s per connection and direction" if args.rate_mbps else ""
    repository = (f"{args.states:,} existing states ({args.layout}"
                  f"{f', {args.folders} folders' if args.layout == 'folders' else ''}), writer w on state w"
                  if args.states else "50 states, 100 commits, each writer on a state of its own")
    print(f"{args.label}: lighttpd + git http-backend behind a proxy adding {args.delay_ms:g} ms per chunk each way"
          f"{rate}; {os.cpu_count()} cores; states of {args.state_bytes} bytes; load average (1 min) "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print()
    print(f"Workload: {'cold (no warm-up, empty caches right before the run)' if args.cold else 'warm (one untimed POST per writer first)'}; "
          f"route {args.route} ({'writer w on process w % P, one connection' if args.route == 'sticky' else 'write k of writer w on process (w + k) % P, one connection per (writer, process)'}); "
          f"repository: {repository}.")
    print()
    print(f"git CLI push through the proxy: median {push_ms:.0f} ms ({min(pushes):.0f}–{max(pushes):.0f}), "
          f"{args.push_runs} runs: single-pusher ceiling {ceiling:.2f} writes/s")
    print()
    print("Latency of a write: from its first request to its 200, 503 resends included; longest request: "
          "the longest single HTTP request (bounded by the write budget).")
    print()
    print("Bytes per write: through the proxy (HTTP, headers included) per answered write, up (to the git "
          "server) / down, from the run's start until nothing moved for a second after it.")
    print()
    print("| processes | writers | writes answered | writes/s | × ceiling | p50 ms | p99 ms | max ms | "
          "longest request ms | commits / writes | lost | non-2xx (codes) | CPU busy | bytes per write up / down |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["lat"] or [0]
        rate = r["answered"] / r["wall"]
        print(f"| {r['processes']} | {r['writers']} | {r['answered']} / {r['writes']} | {rate:.1f} | "
              f"{rate / ceiling:.1f}× | {s.percentile(lat, 50):.0f} | {s.percentile(lat, 99):.0f} | "
              f"{max(lat):.0f} | {r['longest_request']:.0f} | {r['commits']} / {r['answered']} | {r['lost'] + r['wrong']} | "
              f"{r['non2xx']} {tuple(r['codes']) or ''} | {r['cpu_busy']:.0%} | {wire(r)} |")
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
