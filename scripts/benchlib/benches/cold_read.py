"""Cold GET of one small state next to big ones (issue 17): gitstate vs the git CLI's partial clone.

Setup: lighttpd + `git http-backend` (CGI, basic auth; benchlib.support's helpers) serving one bare
repository whose `main` holds a 2 KiB state and N incompressible states of M MiB (default 40 × 2
MiB), with `uploadpack.allowFilter` on (as GitHub and GitLab offer it) unless --no-filter.

Each run, for each gitstate binary given:
  gitstate  a `gitstate serve` with a fresh, empty --cache-dir (a new Lambda container's /tmp);
            the first GET of the small state is timed (the server is up before the clock starts),
            then a second GET (warm); the cache directory's bytes are counted after the cold GET.
  git CLI   `git clone -q --depth 1 --filter=blob:none --no-checkout URL DIR` +
            `git -C DIR cat-file -p main:small.tfstate`, timed together; DIR's bytes counted.

Usage: scripts/bench cold-read [--runs 7] [--states 40] [--state-mib 2] [--no-filter]
                               [--gitstate BIN[=LABEL]]...
Prints a markdown table of medians (min–max) for docs/BENCHMARKS.md.
"""
import os
import shutil
import tempfile
import time

from benchlib import support as s

SMALL = "small.tfstate"


def add_arguments(parser):
    """--runs, --states, --state-mib, --no-filter, --gitstate (repeatable)."""
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--states", type=int, default=40)
    parser.add_argument("--state-mib", type=int, default=2)
    parser.add_argument("--no-filter", action="store_true",
                        help="leave uploadpack.allowFilter off (gitstate falls back to whole trees)")
    parser.add_argument("--gitstate", action="append", default=[],
                        help="BIN or BIN=LABEL; may be repeated (default: $GITSTATE_BIN or the release build)")


def seed(root, repos, states, state_mib, allow_filter):
    """The bare repository with the small state and the big ones; returns the small state."""
    bare = s.init_bare(os.path.join(repos, "states.git"), allow_filter)
    work = os.path.join(root, "seed")
    s.git("clone", "-q", bare, work)
    small = s.state_body(1, 2048)
    with open(os.path.join(work, SMALL), "wb") as f:
        f.write(small)
    for i in range(states):
        with open(os.path.join(work, f"big-{i:02}.tfstate"), "wb") as f:
            f.write(os.urandom(state_mib * 1024 * 1024))
    s.git("add", "-A", cwd=work)
    s.git("-c", "user.name=bench", "-c", "user.email=b@b", "commit", "-qm", "seed", cwd=work)
    s.git("push", "-q", "origin", "HEAD:main", cwd=work)
    shutil.rmtree(work)
    return small


def gitstate_run(binary, root, remote, run, expected):
    """(cold GET ms, cache bytes after it, warm GET ms) of a fresh server."""
    cache = os.path.join(root, f"cache-{os.path.basename(binary)}-{run}")
    server = s.Gitstate(binary, ["--repository", f"default={remote}", "--cache-dir", cache],
                        s.git_credentials_env("warn"), root)
    try:
        client = server.client()
        cold, body = client.timed("GET", f"/state/default/{SMALL}")
        if body != expected:
            raise SystemExit(f"{binary}: the cold GET answered {len(body)} bytes, not the state")
        size = s.dir_bytes(cache)
        warm, _ = client.timed("GET", f"/state/default/{SMALL}")
    finally:
        server.stop()
    shutil.rmtree(cache, ignore_errors=True)
    return cold, size, warm


def git_run(root, auth_remote, run, expected):
    """(ms, bytes of .git) of the git CLI's partial clone + cat-file."""
    work = os.path.join(root, f"clone-{run}")
    start = time.perf_counter()
    s.git("clone", "-q", "--depth", "1", "--filter=blob:none", "--no-checkout", auth_remote, work)
    body = s.git("cat-file", "-p", f"main:{SMALL}", cwd=work)
    took = s.ms_since(start)
    if body != expected:
        raise SystemExit("git cat-file answered something else than the state")
    size = s.dir_bytes(os.path.join(work, ".git"))
    shutil.rmtree(work)
    return took, size


def run(args):
    """Interleaved runs of every binary and the git CLI, then the table."""
    s.require_lighttpd()
    binaries = args.gitstate or [s.default_gitstate()]
    binaries = [(b.split("=", 1) + [os.path.basename(b)])[:2] for b in binaries]
    root = tempfile.mkdtemp(prefix="gitstate-cold-")
    repos = os.path.join(root, "repos")
    os.makedirs(repos)
    expected = seed(root, repos, args.states, args.state_mib, not args.no_filter)
    results = {label: ([], [], []) for _, label in binaries}
    cli = ([], [])
    githttp = None
    try:
        githttp = s.GitHttp(root)
        remote = githttp.url("states.git")
        # Interleaved, so that load on the shared machine hits every column alike.
        for run_index in range(args.runs):
            for binary, label in binaries:
                for column, value in zip(results[label], gitstate_run(binary, root, remote, run_index, expected)):
                    column.append(value)
            took, size = git_run(root, s.with_credentials(remote), run_index, expected)
            cli[0].append(took)
            cli[1].append(size)
    finally:
        if githttp:
            githttp.stop()
        shutil.rmtree(root, ignore_errors=True)

    mib = 1024 * 1024
    print(f"runs: {args.runs} (medians, min–max); 1 state of 2 KiB next to {args.states} × "
          f"{args.state_mib} MiB; uploadpack.allowFilter {'off' if args.no_filter else 'on'}; "
          f"loopback lighttpd + git http-backend, basic auth; {os.cpu_count()} cores")
    print()
    s.table_header("client", "cold GET ms", "on disk after it (MiB)", "warm GET ms", "cold ÷ git CLI")
    c = s.summarize(cli[0])
    for _, label in binaries:
        cold, size, warm = (s.summarize(column) for column in results[label])
        print(f"| gitstate `{label}` | {cold[0]:.0f} ({cold[1]:.0f}–{cold[2]:.0f}) | "
              f"{size[0] / mib:.2f} | {warm[0]:.1f} ({warm[1]:.1f}–{warm[2]:.1f}) | {cold[0] / c[0]:.2f}× |")
    size = s.summarize(cli[1])
    print(f"| git clone --depth 1 --filter=blob:none + cat-file | {c[0]:.0f} ({c[1]:.0f}–{c[2]:.0f}) | "
          f"{size[0] / mib:.2f} | – | 1.00× |")
