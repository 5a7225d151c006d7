"""Warm latency: gitstate over smart HTTP vs the git CLI doing the same work.

Starts lighttpd + `git http-backend` (basic auth) on loopback, a `gitstate serve` configured with
that remote, and measures, for each state size:

  GET     gitstate GET (tip unchanged)        vs  git ls-remote + git fetch --depth 1 + git show
  POST    gitstate POST (a new serial)        vs  git commit + git push
  LOCK    gitstate LOCK                       vs  git commit (lock file) + git push to a new branch
  UNLOCK  gitstate UNLOCK                     vs  git push --delete of the lock branch
  POST (lock held)  gitstate POST ?ID=<lock>  vs  git commit + git push (Terraform's writes)

and, for POST, LOCK and UNLOCK, the *floor*: the same git requests gitstate sends, replayed by a
minimal client (Python http.client, one kept-alive connection, packs and commands prepared before
the clock starts): for POST the receive-pack advertisement then the push with its pack, for LOCK
and UNLOCK the push alone (gitstate knows the old id: none for a new lock, the one it recorded
for its own lock), for POST (lock held) the push alone with the lock branch asserted unchanged.
No client that sends these requests to this server can be faster: the floor is the git server's
own cost, and floor / git CLI is the lowest ratio reachable with them.

Every state body is made before the clock starts, for gitstate, the git CLI (which writes it to
its file inside the clock) and the floor alike (until 2026-11-25 gitstate's and the CLI's POSTs
counted Python serializing the body: about 5 ms of a 1 MiB POST, on both sides of the ratio).

Usage: scripts/bench http [--runs 30] [--sizes 10240,1048576] [--gitstate PATH]
Prints a markdown table (median, min-max, ratio gitstate/git) for docs/BENCHMARKS.md.
"""
import base64
import http.client
import os
import subprocess
import tempfile
import time

from benchlib import support as s


HELD = "POST (lock held)"
CLI_BASELINE = {HELD: "POST"}


def add_arguments(parser):
    """--runs, --sizes, --gitstate."""
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sizes", default="10240,1048576")
    s.add_gitstate_argument(parser)


def lock_unlock_samples(runs, lock, unlock):
    """Milliseconds of lock(i) and of unlock(i), alternating, `runs` times each."""
    lock_samples, unlock_samples = [], []
    for i in range(runs):
        start = time.perf_counter()
        lock(i)
        lock_samples.append(s.ms_since(start))
        start = time.perf_counter()
        unlock(i)
        unlock_samples.append(s.ms_since(start))
    return lock_samples, unlock_samples


def next_bodies(serial, size, runs):
    """The next `runs` states (serials after serial[0], which moves on), made before the clock
    starts: what is timed is the system under test, not Python serializing 1 MiB of JSON (about
    5 ms per body, as much as gitstate's own work on it)."""
    bodies = []
    for _ in range(runs):
        serial[0] += 1
        bodies.append(s.state_body(serial[0], size))
    return bodies


def gitstate_samples(client, size, runs, serial):
    """GET, POST, LOCK, UNLOCK through gitstate for one state size."""
    path = f"/state/default/bench-{size}.tfstate"
    client.request("POST", path, s.state_body(serial[0], size))
    client.request("GET", path)  # warm the cache

    bodies = next_bodies(serial, size, runs)
    results = {"GET": s.timed(lambda i: client.request("GET", path), runs),
               "POST": s.timed(lambda i: client.request("POST", path, bodies[i]), runs)}
    results["LOCK"], results["UNLOCK"] = lock_unlock_samples(
        runs, lambda i: client.request("LOCK", path, s.lock_body(f"bench-{size}-{i}")),
        lambda i: client.request("UNLOCK", path, s.lock_body(f"bench-{size}-{i}")))
    # Terraform's writes: by the holder of the lock, its ID in the URL.
    held = f"bench-{size}-held"
    client.request("LOCK", path, s.lock_body(held))

    bodies = next_bodies(serial, size, runs)
    results[HELD] = s.timed(lambda i: client.request("POST", f"{path}?ID={held}", bodies[i]), runs)
    client.request("UNLOCK", path, s.lock_body(held))
    return results


def one_file_commit(work, name, body, message, parent=None):
    """A commit (made with git plumbing in `work`) whose tree holds only `name` = `body`."""
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=work, input=body,
                          check=True, stdout=subprocess.PIPE).stdout.decode().strip()
    tree = subprocess.run(["git", "mktree"], cwd=work, check=True, stdout=subprocess.PIPE,
                          input=f"100644 blob {blob}\t{name}\n".encode()).stdout.decode().strip()
    parents = ["-p", parent] if parent else []
    return s.git("commit-tree", tree, *parents, "-m", message, cwd=work).decode().strip()


def git_cli_samples(root, auth_remote, size, runs, serial):
    """The same four operations with the git CLI in a depth-1 clone."""
    work = os.path.join(root, f"clone-{size}")
    s.git("clone", "-q", "--depth", "1", auth_remote, work)
    s.git("config", "user.name", "bench", cwd=work)
    s.git("config", "user.email", "bench@localhost", cwd=work)
    state_file = f"bench-{size}.tfstate"
    branch = f"refs/heads/locks/{state_file}"

    def get(i):
        s.git("ls-remote", "origin", "refs/heads/main", cwd=work)
        s.git("fetch", "-q", "--depth", "1", "origin", "main", cwd=work)
        s.git("show", f"FETCH_HEAD:{state_file}", cwd=work)

    bodies = next_bodies(serial, size, runs)

    def post(i):
        with open(os.path.join(work, state_file), "wb") as f:
            f.write(bodies[i])
        s.git("commit", "-q", "-am", f"Update {state_file}", cwd=work)
        s.git("push", "-q", "origin", "HEAD:main", cwd=work)

    def lock(i):
        commit = one_file_commit(work, f"{state_file}.lock", s.lock_body(f"cli-{i}"), "Lock")
        s.git("push", "-q", "origin", f"{commit}:{branch}", cwd=work)

    get(0)
    results = {"GET": s.timed(get, runs), "POST": s.timed(post, runs)}
    results["LOCK"], results["UNLOCK"] = lock_unlock_samples(
        runs, lock, lambda i: s.git("push", "-q", "origin", "--delete", branch, cwd=work))
    return results


def pkt(line):
    """One pkt-line."""
    return b"%04x" % (len(line) + 4) + line


class Floor:
    """The requests of a push (advertisement unless told, receive-pack), nothing else."""

    def __init__(self, remote):
        rest = remote.split("://", 1)[1]
        hostport, self.path = rest.split("/", 1)
        host, port = hostport.split(":")
        self.conn = http.client.HTTPConnection(host, int(port))
        token = base64.b64encode(f"{s.USER}:{s.PASSWORD}".encode()).decode()
        self.auth = {"Authorization": f"Basic {token}"}

    def push(self, old, new, ref, pack, advertisement=True, also=()):
        """GET the advertisement (unless told not to), POST the command (and pack); checks the report
        says ok. `also`: more (old, new, ref) commands, in the same atomic push."""
        if advertisement:
            self.conn.request("GET", f"/{self.path}/info/refs?service=git-receive-pack", headers=self.auth)
            answer = self.conn.getresponse()
            answer.read()
            assert answer.status == 200, answer.status
        capabilities = b"\0report-status atomic\n" if also else b"\0report-status\n"
        body = pkt(f"{old} {new} {ref}".encode() + capabilities)
        for more in also:
            body += pkt(" ".join(more).encode() + b"\n")
        body += b"0000" + pack
        headers = dict(self.auth, **{"Content-Type": "application/x-git-receive-pack-request"})
        self.conn.request("POST", f"/{self.path}/git-receive-pack", body=body, headers=headers)
        answer = self.conn.getresponse()
        report = answer.read()
        assert answer.status == 200 and b"ok " + ref.encode() in report, report


def pack_of(work, commits, exclude=()):
    """A pack of `commits` and what they reach, less `exclude` and what it reaches."""
    revs = "".join(f"{c}\n" for c in commits) + "".join(f"^{c}\n" for c in exclude)
    return subprocess.run(["git", "pack-objects", "--stdout", "--revs", "-q"], cwd=work, input=revs.encode(),
                          check=True, stdout=subprocess.PIPE).stdout


def floor_samples(remote, work, size, runs, serial):
    """POST, LOCK, UNLOCK as their git requests, prepared first (see the module's doc)."""
    zero = "0" * 40
    state_file = f"bench-{size}.tfstate"
    tip = s.git("rev-parse", "HEAD", cwd=work).decode().strip()
    posts, parent = [], tip
    for i in range(runs):
        serial[0] += 1
        commit = one_file_commit(work, state_file, s.state_body(serial[0], size), f"Update {state_file}", parent)
        posts.append((parent, commit, pack_of(work, [commit], [parent])))
        parent = commit
    locks = []
    for i in range(runs):
        commit = one_file_commit(work, f"{state_file}.lock", s.lock_body(f"floor-{i}"), "Lock")
        locks.append((commit, pack_of(work, [commit])))
    floor = Floor(remote)
    branch = f"refs/heads/locks/{state_file}"
    results = {"POST": s.timed(lambda i: floor.push(posts[i][0], posts[i][1], "refs/heads/main", posts[i][2]),
                               runs)}
    results["LOCK"], results["UNLOCK"] = lock_unlock_samples(
        runs, lambda i: floor.push(zero, locks[i][0], branch, locks[i][1], advertisement=False),
        lambda i: floor.push(locks[i][0], zero, branch, b"", advertisement=False))
    # The holder's write: the state update and the lock asserted unchanged, one push.
    held_lock = one_file_commit(work, f"{state_file}.lock", s.lock_body("floor-held"), "Lock")
    floor.push(zero, held_lock, branch, pack_of(work, [held_lock]), advertisement=False)
    held = []
    for i in range(runs):
        serial[0] += 1
        commit = one_file_commit(work, state_file, s.state_body(serial[0], size), f"Update {state_file}", parent)
        held.append((parent, commit, pack_of(work, [commit], [parent])))
        parent = commit
    results[HELD] = s.timed(lambda i: floor.push(held[i][0], held[i][1], "refs/heads/main", held[i][2],
                                                 advertisement=False, also=[(held_lock, held_lock, branch)]),
                            runs)
    floor.push(held_lock, zero, branch, b"", advertisement=False)
    return results


def run(args):
    """Measures every size, then prints the table."""
    s.require_lighttpd()
    root = tempfile.mkdtemp(prefix="gitstate-bench-")
    rows = []
    githttp, server = s.gitstate_on_git_http(args.gitstate, root)
    try:
        remote = githttp.url("states.git")
        client = server.client()
        # The git CLI baseline works in a depth-1 clone with the credential in the URL.
        auth_remote = s.with_credentials(remote)
        for size in s.int_list(args.sizes):
            serial = [1]
            results = gitstate_samples(client, size, args.runs, serial)
            baseline = git_cli_samples(root, auth_remote, size, args.runs, serial)
            floor = floor_samples(remote, os.path.join(root, f"clone-{size}"), size, args.runs, serial)
            for op in ["GET", "POST", "LOCK", "UNLOCK", HELD]:
                # The git CLI has no lock to check: its POST is the baseline of both.
                g, b = s.summarize(results[op]), s.summarize(baseline[CLI_BASELINE.get(op, op)])
                f = s.summarize(floor[op]) if op in floor else None
                rows.append((size, op, g, b, f))
    finally:
        s.shut_down(root, server, githttp)

    print(f"runs per cell: {args.runs}; loopback; lighttpd + git http-backend with basic auth; "
          f"{os.cpu_count()} cores")
    print()
    s.table_header("state size", "operation", "gitstate median (min–max) ms", "git CLI median (min–max) ms",
                   "ratio", "floor: the same git requests alone, median (min–max) ms", "floor / git CLI")
    for size, op, g, b, f in rows:
        floor = f"{f[0]:.1f} ({f[1]:.1f}–{f[2]:.1f}) | {f[0] / b[0]:.2f}×" if f else "– | –"
        print(f"| {size // 1024} KiB | {op} | {g[0]:.1f} ({g[1]:.1f}–{g[2]:.1f}) | "
              f"{b[0]:.1f} ({b[1]:.1f}–{b[2]:.1f}) | {g[0] / b[0]:.2f}× | {floor} |")
