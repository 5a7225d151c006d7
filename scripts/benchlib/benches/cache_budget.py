"""The cache's disk budget: what a long run of writes leaves in the cache, and what retiring costs.

Two workloads, each through lighttpd + `git http-backend` and one `gitstate serve` (its own
cache directory), each write answered before the next is sent:
- wide: --states small states in one directory of a repository (a controller's one-resource
  states); --writes POSTs go round-robin over them, each a new serial. Every write adds a root
  tree of the whole directory to the cache.
- large: one state of --large-bytes that zlib cannot shrink (printable noise, as a sealed state
  is); --writes POSTs of it, each a new serial.
For every binary and byte budget (--budgets, MiB, `GITSTATE_CACHE_MAX_MIB`) the table gives the
median and p99 POST latency, the generations retired (from the log), and the cache directory's
size after the last write and the largest seen after any write. --baseline PATH adds a binary
(e.g. one built before the byte budget existed), run with its own defaults.

Usage: scripts/bench cache-budget [--writes 300] [--states 2000] [--large-bytes 1048576]
                                  [--budgets 128,4] [--gitstate PATH] [--baseline PATH]
Prints a markdown table.
"""
import os
import random
import string
import subprocess
import tempfile

from benchlib import support as s


def add_arguments(parser):
    """--writes, --states, --large-bytes, --budgets, --gitstate, --baseline."""
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--states", type=int, default=2000)
    parser.add_argument("--large-bytes", type=int, default=1 << 20)
    parser.add_argument("--budgets", type=s.int_list, default=[128, 4],
                        help="byte budgets in MiB (GITSTATE_CACHE_MAX_MIB), comma-separated")
    s.add_gitstate_argument(parser)
    parser.add_argument("--baseline", help="another gitstate binary, run with its own defaults")


def small_state(name, serial):
    """A one-resource-sized state of `name` at `serial`."""
    return ('{"version":4,"terraform_version":"1.15.5","serial":%d,"lineage":"%s",'
            '"outputs":{},"resources":[]}' % (serial, name)).encode()


def noise_state(serial, size, noise):
    """A state of about `size` bytes of printable noise (what zlib cannot shrink much): the window
    of `noise` starting at `serial`, so every write differs."""
    return ('{"version":4,"terraform_version":"1.15.5","serial":%d,"lineage":"large",'
            '"outputs":{"blob":{"value":"%s","type":"string"}},"resources":[]}'
            % (serial, noise[serial:serial + size])).encode()


def seed_wide(root, repo, states):
    """Commits `states` small states (states/sNNNN.tfstate) to `repo` through a work clone."""
    work = os.path.join(root, "seed")
    s.git("init", "-q", "-b", "main", work)
    os.makedirs(os.path.join(work, "states"))
    for i in range(states):
        with open(os.path.join(work, "states", f"s{i:05}.tfstate"), "wb") as f:
            f.write(small_state(f"s{i:05}", 1))
    s.git("add", ".", cwd=work)
    s.git("-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "seed",
          cwd=work)
    s.git("push", "-q", repo, "main", cwd=work)


def measure(args, binary, budget, workload):
    """(POST latencies in ms, generations retired, cache bytes at the end, largest cache bytes)."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-cache-")
    githttp = server = None
    try:
        githttp = s.GitHttp(root)
        repo = s.init_bare(os.path.join(githttp.repos, "states.git"))
        if workload == "wide":
            seed_wide(root, repo, args.states)
        cache = os.path.join(root, "cache")
        env = dict(s.clean_env(), RUST_LOG="info", GIT_USERNAME=s.USER, GIT_PASSWORD=s.PASSWORD,
                   GITSTATE_CACHE_DIR=cache, NO_COLOR="1")
        if budget is not None:
            env["GITSTATE_CACHE_MAX_MIB"] = str(budget)
        server = s.Gitstate(binary, ["--repository", f"default={githttp.url('states.git')}"], env, root,
                            log="gitstate.log")
        client = server.client()
        # the bodies are made before the clock
        if workload == "wide":
            bodies = [(f"/state/default/states/s{i % args.states:05}.tfstate",
                       small_state(f"s{i % args.states:05}", 2 + i // args.states)) for i in range(args.writes)]
        else:
            alphabet = string.ascii_letters + string.digits + "+/"
            noise = "".join(random.Random(7).choices(alphabet, k=args.large_bytes + args.writes + 1))
            bodies = [("/state/default/large.tfstate", noise_state(i + 1, args.large_bytes, noise))
                      for i in range(args.writes)]
        samples, largest = [], 0
        for i, (path, body) in enumerate(bodies):
            ms, _ = client.timed("POST", path, body)
            samples.append(ms)
            largest = max(largest, s.dir_bytes(cache))
            if i % 50 == 49:
                s.log(f"  {workload}, budget {budget}: {i + 1} writes, cache {largest} bytes at most")
        end = s.dir_bytes(cache)
        largest = max(largest, end)
        server.stop()
        with open(os.path.join(root, "gitstate.log"), "rb") as f:
            retired = f.read().count(b"cache generation retired")
        server = None
        return samples, retired, end, largest
    finally:
        s.shut_down(root, server, githttp)


def run(args):
    """Measures every (binary, budget, workload), then prints the table."""
    runs = [(args.gitstate, "gitstate", budget) for budget in args.budgets]
    if args.baseline:
        runs.append((args.baseline, "baseline", None))
    rows = []
    for workload in ("wide", "large"):
        for binary, label, budget in runs:
            s.log(f"{workload}: {label} {binary}, budget {budget if budget is not None else 'default'}")
            samples, retired, end, largest = measure(args, binary, budget, workload)
            rows.append((workload, label, budget, samples, retired, end, largest))

    print(f"{args.writes} POSTs per row, one after another; wide: {args.states} states in one directory; "
          f"large: {args.large_bytes}-byte state of noise; loopback; {os.cpu_count()} cores; "
          f"load average (1 min) {os.getloadavg()[0]:.1f}")
    print()
    s.table_header("workload", "binary", "budget MiB", "POST ms median", "POST ms p99",
                   "generations retired", "cache MB at the end", "cache MB at most")
    for workload, label, budget, samples, retired, end, largest in rows:
        s.table_row(workload, label, budget if budget is not None else "its default",
                    f"{s.percentile(samples, 50):.1f}", f"{s.percentile(samples, 99):.1f}", retired,
                    f"{end / 1e6:.1f}", f"{largest / 1e6:.1f}")
    return 0
