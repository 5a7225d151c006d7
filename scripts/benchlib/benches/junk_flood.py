"""A flood of junk credentials against a team-mode server: what it costs, and what a real caller waits.

Starts `gitstate serve --auth-mode team` on a fresh embedded repository with one team token
(and, in the `bcrypt` setup, one bcrypt user of --cost, as `htpasswd -nB` makes them), writes a
small state with the token, then:
1. quiet: --probes GETs of that state with the token, one at a time (each on a new connection);
2. the junk alone, one at a time: a random Basic name and password, a random Bearer string;
   each one's time (what one junk request costs the server, as its caller sees it);
3. a flood: --threads senders (in --processes processes, so the measuring client keeps its own
   interpreter) send junk Basic and Bearer credentials for --seconds on kept connections while
   the token's GETs go on one at a time, each on a new connection;
4. the server's CPU seconds per junk request during the flood (from /proc/PID/stat).

Setups (--setups): `tokens` (a token only: no credential can make the server hash a password),
`bcrypt` (also a bcrypt user: every named credential costs one bounded hash, known or not).

Usage: scripts/bench junk-flood [--threads 32] [--processes 4] [--seconds 10] [--probes 200]
       [--cost 10] [--setups tokens,bcrypt] [--gitstate PATH]
Prints markdown tables.
"""
import base64
import hashlib
import http.client
import multiprocessing
import os
import secrets
import tempfile
import threading
import time

from benchlib import support as s

PATH = "/state/default/flood.tfstate"
TOKEN = "flood-bench-team-token"


def add_arguments(parser):
    """--threads, --processes, --seconds, --probes, --cost, --setups, --gitstate."""
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--cost", type=int, default=10, help="the bcrypt user's cost")
    parser.add_argument("--setups", default="tokens,bcrypt")
    s.add_gitstate_argument(parser)


def bcrypt_hash(password, cost):
    """A `$2y$` bcrypt hash as `htpasswd -nB` writes it (apache2-utils, which
    scripts/install-test-deps.sh installs)."""
    import shutil
    import subprocess
    if not shutil.which("htpasswd"):
        raise SystemExit("htpasswd is missing: run scripts/install-test-deps.sh")
    out = subprocess.run(["htpasswd", "-nbBC", str(cost), "alice", password],
                         capture_output=True, check=True, text=True).stdout.strip()
    return out.split(":", 1)[1]


def junk_header(i):
    """Alternately a random Basic name:password and a random Bearer string (not a JWT)."""
    if i % 2 == 0:
        pair = f"{secrets.token_hex(6)}:{secrets.token_urlsafe(18)}".encode()
        return "Basic " + base64.b64encode(pair).decode()
    return "Bearer " + secrets.token_urlsafe(30)


def flood_worker(port, threads, seconds, counts):
    """One sender process: `threads` threads, each on a kept connection, for `seconds`."""
    stop_at = time.time() + seconds

    def sender():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i, local = 0, {}
        while time.time() < stop_at:
            try:
                conn.request("GET", PATH, headers={"Authorization": junk_header(i)})
                response = conn.getresponse()
                response.read()
                local[response.status] = local.get(response.status, 0) + 1
            except (OSError, http.client.HTTPException):
                local["error"] = local.get("error", 0) + 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            i += 1
        for status, n in local.items():
            counts.put((status, n))

    workers = [threading.Thread(target=sender) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def get_with(port, authorization, expect):
    """One GET on a new connection; its time in ms."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.perf_counter()
    conn.request("GET", PATH, headers={"Authorization": authorization})
    response = conn.getresponse()
    response.read()
    took = s.ms_since(start)
    conn.close()
    if response.status not in expect:
        raise SystemExit(f"GET answered {response.status}, expected {expect}")
    return took


def cpu_seconds(pid):
    """The process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args, setup):
    """One setup's numbers: a dict of lists and counts."""
    root = tempfile.mkdtemp(prefix=f"gitstate-bench-flood-{setup}-")
    port = s.free_port()
    token_hash = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()
    cmd = [args.gitstate, "serve", "--listen", f"127.0.0.1:{port}", "--auth-mode", "team",
           "--token-hash", token_hash]
    if setup == "bcrypt":
        cmd += ["--user", "alice:" + bcrypt_hash("alice-password", args.cost)]
    env = s.clean_env()
    env.pop("RUST_LOG", None)  # the default (info): one access line per request, as deployed
    server = s.spawn(cmd, cwd=root, env=env, stdout=s.log_file(root, "serve.log"),
                     stderr=s.log_file(root, "serve.log"))
    bearer = f"Bearer {TOKEN}"
    try:
        s.wait_http(f"http://127.0.0.1:{port}/_/health", proc=server)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", PATH, body=s.state_body(1, 1024),
                     headers={"Authorization": bearer, **s.JSON})
        posted = conn.getresponse()
        posted.read()
        if posted.status != 200:
            raise SystemExit(f"the seeding POST answered {posted.status}")
        quiet = [get_with(port, bearer, (200,)) for _ in range(args.probes)]
        junk_basic = [get_with(port, junk_header(0), (401, 503)) for _ in range(40)]
        junk_bearer = [get_with(port, junk_header(1), (401, 503)) for _ in range(40)]

        counts = multiprocessing.Queue()
        per_process = max(1, args.threads // args.processes)
        cpu_before = cpu_seconds(server.pid)
        senders = [multiprocessing.Process(target=flood_worker,
                                           args=(port, per_process, args.seconds, counts))
                   for _ in range(args.processes)]
        started = time.time()
        for p in senders:
            p.start()
        time.sleep(0.5)
        during = []
        while time.time() < started + args.seconds - 0.2:
            during.append(get_with(port, bearer, (200,)))
        totals = {}
        for p in senders:
            p.join()
        cpu_after = cpu_seconds(server.pid)
        while not counts.empty():
            status, n = counts.get()
            totals[status] = totals.get(status, 0) + n
    finally:
        s.stop(server)
        s.remove_root(root)
    junk = sum(totals.values())
    return {
        "quiet": quiet, "junk_basic": junk_basic, "junk_bearer": junk_bearer, "during": during,
        "totals": totals, "junk": junk, "seconds": args.seconds,
        "cpu_ms_per_junk": (cpu_after - cpu_before) * 1000 / max(junk, 1),
    }


def run(args):
    """Prints the tables."""
    setups = [x.strip() for x in args.setups.split(",") if x.strip()]
    results = {setup: measure(args, setup) for setup in setups}
    print(f"{args.threads} junk senders ({args.processes} processes) for {args.seconds:.0f} s; "
          f"bcrypt user cost {args.cost}; the token's GETs one at a time, each on a new connection")
    print()
    print("| setup | token GET quiet, p50 / p90 ms | junk Basic alone, median ms | junk Bearer alone, median ms |"
          " token GET during the flood, p50 / p90 / p99 ms (n) | junk requests/s | junk answers | server CPU ms per junk request |")
    print("|---|---|---|---|---|---|---|---|")
    for setup, r in results.items():
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(r["totals"].items(), key=str))
        print(f"| {setup} | {s.percentile(r['quiet'], 50):.2f} / {s.percentile(r['quiet'], 90):.2f} "
              f"| {s.percentile(r['junk_basic'], 50):.2f} | {s.percentile(r['junk_bearer'], 50):.2f} "
              f"| {s.percentile(r['during'], 50):.2f} / {s.percentile(r['during'], 90):.2f} / "
              f"{s.percentile(r['during'], 99):.2f} ({len(r['during'])}) "
              f"| {r['junk'] / r['seconds']:.0f} | {answers} | {r['cpu_ms_per_junk']:.3f} |")
    return 0
