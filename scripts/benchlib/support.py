"""What the benchmarks share: ports, child processes, lighttpd + `git http-backend`, `gitstate
serve`, moto, the latency proxy, `cargo lambda watch`, HTTP calls, timing, statistics, tables and
the bodies the benchmarks send."""
import atexit
import http.client
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(SCRIPTS)
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gitstate-target"))
TOOLS = os.environ.get("GITSTATE_TOOLS", os.path.expanduser("~/.cache/gitstate-tools"))
MOTO_BIN = os.path.join(TOOLS, "moto-5.2.5", "bin")
LAMBDA_VENV = os.path.join(TOOLS, "cargo-lambda-venv", "bin")
LAMBDA_PREFIX = "/lambda-url/gitstate-lambda"
USER, PASSWORD = "bench", "bench-secret"
JSON = {"Content-Type": "application/json"}
# A request to moto's KMS needs an Authorization header; moto does not check the signature.
KMS_AUTH = ("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/kms/aws4_request, "
            "SignedHeaders=host, Signature=0")


# ------------------------------------------------------------------ binaries and options
def default_gitstate():
    """The gitstate binary: $GITSTATE_BIN, else the release build in the cargo target dir."""
    return os.environ.get("GITSTATE_BIN") or os.path.join(TARGET, "release", "gitstate")


def add_gitstate_argument(parser):
    """--gitstate PATH (default: default_gitstate())."""
    parser.add_argument("--gitstate", default=default_gitstate(),
                        help="the gitstate binary (default: $GITSTATE_BIN or the release build)")


def int_list(text):
    """"1,4,16" -> [1, 4, 16]."""
    return [int(x) for x in text.split(",")]


def require_lighttpd():
    """Exits with the install hint when lighttpd is missing."""
    if not shutil.which("lighttpd"):
        raise SystemExit("lighttpd is missing: run scripts/install-test-deps.sh")


# ------------------------------------------------------------------ ports
def free_port():
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    """Waits until something accepts connections on 127.0.0.1:port."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def wait_http(url, timeout=30, interval=0.1, proc=None, request_timeout=1):
    """Waits until `url` answers 200 (a server's health endpoint); with `proc`, fails as soon as
    that process has exited."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=request_timeout) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(interval)
    raise SystemExit(f"{url} did not answer")


# ------------------------------------------------------------------ child processes
_children = []


def spawn(cmd, **kwargs):
    """subprocess.Popen, remembered so that it is stopped when the harness exits."""
    proc = subprocess.Popen(cmd, **kwargs)
    _children.append(proc)
    return proc


def stop(proc, timeout=20, sig=signal.SIGTERM):
    """Stops a child gracefully (its own process group when it leads one: cargo lambda watch),
    kills it after `timeout` seconds."""
    if proc is None:
        return
    if proc in _children:
        _children.remove(proc)
    if proc.poll() is None:
        try:
            if proc.pid != os.getpgid(0) and os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, sig)  # its own session, never our group
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_all():
    """Stops every child still running, newest first."""
    for proc in reversed(list(_children)):
        stop(proc)


atexit.register(stop_all)


def log_file(root, name, mode="ab"):
    """An open log file under root for a child's output."""
    return open(os.path.join(root, name), mode)


# ------------------------------------------------------------------ git and its HTTP server
def git(*args, cwd=None, env=None):
    """Runs git, returns its stdout; fails on a non-zero exit."""
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout


def init_bare(path, allow_filter=False):
    """A bare repository on branch main accepting pushes over HTTP; with allow_filter, partial
    fetch is on (uploadpack.allowFilter, as GitHub and GitLab offer it)."""
    git("init", "--bare", "-q", "-b", "main", path)
    git("config", "http.receivepack", "true", cwd=path)
    if allow_filter:
        git("config", "uploadpack.allowFilter", "true", cwd=path)
    return path


def fast_import(repo, files, message=b"seed", on_main=False):
    """One commit on `main` of the bare repository `repo` holding `files` ((path, bytes) pairs),
    made with `git fast-import`; with `on_main`, on top of `main` (its files kept, `files` added
    or replaced) instead of a root commit."""
    chunks, paths = [], []
    for mark, (path, body) in enumerate(files, start=1):
        chunks.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(body), body))
        paths.append(path)
    chunks.append(b"commit refs/heads/main\ncommitter bench <b@b> 1764115200 +0000\n"
                  b"data %d\n%s\n" % (len(message), message))
    if on_main:
        chunks.append(b"from refs/heads/main^0\n")
    for mark, path in enumerate(paths, start=1):
        chunks.append(b"M 100644 :%d %s\n" % (mark, path.encode()))
    chunks.append(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], input=b"".join(chunks), cwd=repo, check=True)


def commit_file(repo, base, path, body, message):
    """A commit on `base` (a revision; None: a root commit) whose only change is `path` = `body`,
    written with plumbing in `repo` (works in a blobless clone: no blob is read, nothing is
    fetched, no network); its id. Nothing but the new objects changes (no ref, no index)."""
    index = os.path.join(repo, "bench-commit.index")
    env = dict(os.environ, GIT_INDEX_FILE=index, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@b",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="b@b")

    def plumbing(*args, input=None):
        return subprocess.run(["git", *args], cwd=repo, input=input, env=env, check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.decode().strip()
    try:
        blob = plumbing("hash-object", "-w", "--stdin", input=body)
        plumbing("read-tree", base if base else "--empty")
        plumbing("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
        tree = plumbing("write-tree", "--missing-ok")
        return plumbing("commit-tree", tree, *(["-p", base] if base else []), "-m", message)
    finally:
        if os.path.exists(index):
            os.remove(index)


def http_backend_path():
    """The git-http-backend CGI program of the installed git."""
    return os.path.join(git("--exec-path").decode().strip(), "git-http-backend")


def with_credentials(url):
    """The URL with the benchmark's basic-auth user and password in it (for the git CLI)."""
    return url.replace("http://", f"http://{USER}:{PASSWORD}@")


def start_lighttpd(root, repos, port, access_log=None, request_log=None):
    """lighttpd + `git http-backend` serving the bare repositories under `repos` at /git/, basic
    auth (USER, PASSWORD); returns the process once it listens on `port`. `access_log`: a file
    that gets one line per request (method and URL first), written about once a second.
    `request_log`: a file that gets a line (method and URL) for each request that reaches `git
    http-backend`, before its answer (a CGI wrapper writes it)."""
    htpasswd = os.path.join(root, "htpasswd")
    # The password through stdin, never argv.
    hashed = subprocess.run(["openssl", "passwd", "-apr1", "-stdin"], check=True,
                            input=(PASSWORD + "\n").encode(),
                            stdout=subprocess.PIPE).stdout.decode().strip()
    with open(htpasswd, "w") as f:
        f.write(f"{USER}:{hashed}\n")
    conf = os.path.join(root, "lighttpd.conf")
    with open(conf, "w") as f:
        f.write(f"""
server.modules = ("mod_auth", "mod_authn_file", "mod_alias", "mod_setenv", "mod_cgi")
server.document-root = "{root}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{root}/lighttpd.err"
{access_log_conf(access_log)}
alias.url = ("/git/" => "{backend_cgi(root, request_log)}/")
$HTTP["url"] =~ "^/git/" {{
  cgi.assign = ("" => "")
  setenv.add-environment = ("GIT_PROJECT_ROOT" => "{repos}", "GIT_HTTP_EXPORT_ALL" => "1")
  auth.backend = "htpasswd"
  auth.backend.htpasswd.userfile = "{htpasswd}"
  auth.require = ("" => ("method" => "basic", "realm" => "git", "require" => "valid-user"))
}}
""")
    proc = spawn(["lighttpd", "-D", "-f", conf])
    wait_port(port)
    return proc


def backend_cgi(root, request_log):
    """The CGI program serving /git/: `git http-backend`, or with `request_log` a wrapper that
    appends the request's method and URL to it first."""
    if not request_log:
        return http_backend_path()
    wrapper = os.path.join(root, "git-http-backend-logged")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nprintf '%s %s\\n' \"$REQUEST_METHOD\" \"$REQUEST_URI\" >> '{request_log}'\n"
                f"exec '{http_backend_path()}'\n")
    os.chmod(wrapper, 0o755)
    return wrapper


def access_log_conf(path):
    """lighttpd configuration lines logging each request's method and URL to `path` (none
    without a path)."""
    if not path:
        return ""
    return (f'server.modules += ("mod_accesslog")\naccesslog.filename = "{path}"\n'
            'accesslog.format = "%m %U%q %s"')


class GitHttp:
    """lighttpd + `git http-backend` on a free port, serving root/repos (created); `request_log`:
    see start_lighttpd."""

    def __init__(self, root, request_log=None):
        require_lighttpd()
        self.repos = os.path.join(root, "repos")
        os.makedirs(self.repos, exist_ok=True)
        self.port = free_port()
        self.proc = start_lighttpd(root, self.repos, self.port, request_log=request_log)
        self.base = f"http://127.0.0.1:{self.port}/git"

    def url(self, name):
        """The remote URL of repository `name` (without credentials)."""
        return f"{self.base}/{name}"

    def stop(self):
        stop(self.proc)


def start_latency_proxy(root, target_port, delay_ms, rate_mbps=0, stats_port=None, log_name="proxy.log",
                        cut_percent=0):
    """scripts/latency-proxy.py in front of 127.0.0.1:target_port, adding `delay_ms` per chunk
    each way and (`rate_mbps` > 0) limiting each connection, each direction, to that many
    megabytes per second, and (`cut_percent` > 0) cutting that share of its connections at
    random; with `stats_port`, it answers its counters there (see LatencyProxy). Returns
    (process, port)."""
    port = free_port()
    log = log_file(root, log_name)
    extra = ["--rate-mbps", str(rate_mbps)] if rate_mbps else []
    if cut_percent:
        extra += ["--cut-percent", str(cut_percent)]
    if stats_port:
        extra += ["--stats-port", str(stats_port)]
    proc = spawn([sys.executable, os.path.join(SCRIPTS, "latency-proxy.py"), "--listen", str(port),
                  "--target", f"127.0.0.1:{target_port}", "--delay-ms", str(delay_ms), *extra],
                 stdout=log, stderr=log)
    wait_port(port)
    if stats_port:
        wait_port(stats_port)
    return proc, port


class LatencyProxy:
    """scripts/latency-proxy.py in front of 127.0.0.1:target_port (a process of its own, so its
    work does not share the harness's GIL), with its byte counters readable: `totals()`.

    `url(path)`: the proxy's URL for a path on the target (e.g. "/git/states.git")."""

    def __init__(self, root, target_port, delay_ms=0, rate_mbps=0, name="proxy", cut_percent=0):
        self.stats_port = free_port()
        self.proc, self.port = start_latency_proxy(root, target_port, delay_ms, rate_mbps, self.stats_port,
                                                   f"{name}.log", cut_percent)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def read(self):
        """(up, down, connections) forwarded so far, as the proxy counts them right now."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=10) as conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(100)
                if not chunk:
                    break
                data += chunk
        up, down, connections, _cuts = (int(x) for x in data.split())
        return up, down, connections

    def cuts(self):
        """Connections cut so far (`cut_percent`)."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=10) as conn:
            data = conn.makefile("rb").readline()
        return int(data.split()[3])

    def totals(self, settle=0.0, timeout=30.0):
        """(up, down, connections) once nothing has moved through the proxy for `settle` seconds
        (what a client does after its answer, e.g. a push in the background, counts with what
        came before), or after `timeout` seconds."""
        last, quiet_since = self.read(), time.monotonic()
        deadline = quiet_since + timeout
        while settle and time.monotonic() < deadline:
            time.sleep(min(0.1, settle))
            now = self.read()
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= settle:
                break
        return last

    def stop(self):
        stop(self.proc)


def byte_size(n):
    """Bytes for a table: "812 B", "19.6 KB", "1.21 MB" (powers of 1000)."""
    if n < 1000:
        return f"{n:,.0f} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} KB"
    return f"{n / 1_000_000:.2f} MB"


# ------------------------------------------------------------------ gitstate serve
def git_credentials_env(rust_log):
    """os.environ plus the benchmark's git credentials and RUST_LOG."""
    return dict(os.environ, RUST_LOG=rust_log, GIT_USERNAME=USER, GIT_PASSWORD=PASSWORD)


def clean_env(prefixes=("GITSTATE_", "SOPS_", "AWS_")):
    """os.environ without the variables that would configure gitstate behind the benchmark's back."""
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


class Gitstate:
    """`gitstate serve --listen 127.0.0.1:PORT ARGS` on a free port, up once it answers.

    `log`: None (inherit the harness's output), subprocess.DEVNULL, or a file name under `cwd`
    (appended; stdout and stderr). `wait`: "port" (it listens) or "health" (/_/health is 200)."""

    def __init__(self, binary, args, env, cwd, log=None, wait="port", stderr=None):
        self.port = free_port()
        self.log_path = os.path.join(cwd, log) if isinstance(log, str) else None
        self.log = open(self.log_path, "ab") if self.log_path else log
        self.proc = spawn([binary, "serve", "--listen", f"127.0.0.1:{self.port}", *args], env=env, cwd=cwd,
                          stdout=self.log, stderr=stderr if stderr is not None else self.log)
        self.pid = self.proc.pid
        if wait == "health":
            wait_http(f"http://127.0.0.1:{self.port}/_/health")
        else:
            wait_port(self.port)

    def client(self):
        """A kept-alive Client on this server."""
        return Client(self.port)

    def stop(self):
        stop(self.proc)
        if self.log_path:
            self.log.close()

    def offset(self):
        """The log's size now: where the events of what follows start."""
        self.log.flush()
        return os.path.getsize(self.log_path)

    def events(self, since):
        """The JSON log events written after byte offset `since`."""
        return json_events(self.log_path, since)


def json_events(log_path, since=0):
    """The JSON lines of a log after byte offset `since`, parsed."""
    with open(log_path, "rb") as f:
        f.seek(since)
        lines = f.read().decode(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def gitstate_on_git_http(binary, root, log=None):
    """lighttpd + `git http-backend` serving an empty states.git, and a `gitstate serve` with it as
    its default repository (cache in root/cache); returns (GitHttp, Gitstate)."""
    githttp = GitHttp(root)
    try:
        init_bare(os.path.join(githttp.repos, "states.git"))
        env = dict(git_credentials_env("warn"), GITSTATE_CACHE_DIR=os.path.join(root, "cache"))
        server = Gitstate(binary, ["--repository", f"default={githttp.url('states.git')}"], env, root, log=log)
    except BaseException:
        githttp.stop()
        raise
    return githttp, server


def remove_root(root, keep=False, why=""):
    """Removes a benchmark's temporary directory, or with `keep` says where it stays."""
    if keep:
        log(f"kept {root}{why}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def shut_down(root, *servers):
    """Stops the servers given (anything with .stop(); None is skipped), then removes root."""
    for server in servers:
        if server is not None:
            server.stop()
    shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ moto and KMS
def start_moto(log=subprocess.DEVNULL):
    """moto_server on a free port, up once /moto-api/ answers; returns (process, endpoint)."""
    if not os.path.exists(os.path.join(MOTO_BIN, "moto_server")):
        raise SystemExit("moto is missing: run scripts/install-test-deps.sh")
    port = free_port()
    proc = spawn([os.path.join(MOTO_BIN, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                 stdout=log, stderr=subprocess.STDOUT if log is not subprocess.DEVNULL else log)
    endpoint = f"http://127.0.0.1:{port}"
    wait_http(endpoint + "/moto-api/")
    return proc, endpoint


def moto_env(endpoint, **extra):
    """AWS variables pointing the SDK at moto (test credentials, us-east-1)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", **extra}


def kms(endpoint, target, body):
    """One KMS call (e.g. "TrentService.Encrypt") on moto; the parsed answer."""
    req = urllib.request.Request(endpoint, data=json.dumps(body).encode(), method="POST", headers={
        "X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1", "Authorization": KMS_AUTH})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def moto_kms_key(endpoint):
    """The ARN of a new symmetric KMS key on moto."""
    return kms(endpoint, "TrentService.CreateKey", {})["KeyMetadata"]["Arn"]


# ------------------------------------------------------------------ cargo lambda watch
def start_lambda_watch(root, port, env_lines, log_name, timeout):
    """The gitstate-lambda function under `cargo lambda watch --release` on `port`, in a session of
    its own (stopped with killpg), configured by `env_lines` (an env file); returns the process
    once the function's /_/health answers 200 (the first invocation builds it)."""
    if not os.path.exists(os.path.join(LAMBDA_VENV, "cargo-lambda")):
        raise SystemExit("cargo-lambda is missing: run scripts/install-lambda-tools.sh")
    env_file = os.path.join(root, "lambda.env")
    with open(env_file, "w") as f:
        f.write(env_lines)
    log = log_file(root, log_name, "w")
    env = dict(os.environ, PATH=LAMBDA_VENV + os.pathsep + os.environ["PATH"])
    proc = spawn(["cargo", "lambda", "watch", "--release", "--ignore-changes", "-A", "127.0.0.1",
                  "-P", str(port), "-p", "gitstate-lambda", "--env-file", env_file],
                 cwd=ROOT, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}{LAMBDA_PREFIX}/_/health", timeout=timeout, interval=1, proc=proc,
              request_timeout=600)
    return proc


# ------------------------------------------------------------------ HTTP
class Client:
    """One kept-alive connection to a gitstate server; a request that does not answer `expect`
    ends the benchmark."""

    def __init__(self, port, timeout=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def request(self, method, path, body=None, expect=200):
        """The answer's body."""
        self.conn.request(method, path, body=body, headers=JSON)
        response = self.conn.getresponse()
        data = response.read()
        if response.status not in (expect if isinstance(expect, tuple) else (expect,)):
            raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
        return data

    def timed(self, method, path, body=None, expect=200):
        """(milliseconds, body) of one request."""
        start = time.perf_counter()
        data = self.request(method, path, body, expect)
        return ms_since(start), data


def timed_request(conn, method, path, body=None, expect=(200,), busy=None):
    """Milliseconds of one request on an HTTPConnection. With `busy` (a list), a 503 is appended to
    it and the request is sent again, as Terraform's http backend retries 5xx; the time includes
    the retries."""
    start = time.perf_counter()
    while True:
        conn.request(method, path, body=body, headers=JSON)
        response = conn.getresponse()
        data = response.read()
        if response.status == 503 and busy is not None:
            busy.append(data)
            continue
        break
    elapsed = ms_since(start)
    if response.status not in expect:
        raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
    return elapsed


def run_together(target, count, barrier):
    """Runs target(0) ... target(count - 1) in threads that each wait on `barrier` (count + 1
    parties) before their timed work; returns the seconds from the barrier's release until the
    last has ended."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


# ------------------------------------------------------------------ timing and statistics
def ms_since(start):
    """Milliseconds since a time.perf_counter() value."""
    return (time.perf_counter() - start) * 1000


def timed(fn, runs):
    """Milliseconds of fn(0), fn(1), ... fn(runs - 1), each."""
    samples = []
    for i in range(runs):
        start = time.perf_counter()
        fn(i)
        samples.append(ms_since(start))
    return samples


def summarize(samples):
    """(median, min, max)."""
    return statistics.median(samples), min(samples), max(samples)


def cell(samples, fmt=".1f"):
    """"median (min–max)"."""
    m, lo, hi = summarize(samples)
    return f"{m:{fmt}} ({lo:{fmt}}–{hi:{fmt}})"


def percentile(samples, p):
    """The nearest-rank p-th percentile."""
    ordered = sorted(samples)
    k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[k]


def log(message):
    """Progress, on stderr (stdout carries the tables)."""
    print(message, file=sys.stderr)


# ------------------------------------------------------------------ tables
def table_header(*columns):
    """Prints a markdown table's header and separator rows."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def table_row(*cells):
    """Prints one markdown table row."""
    print("| " + " | ".join(str(c) for c in cells) + " |")


# ------------------------------------------------------------------ bodies
def state_body(serial, size):
    """A state padded to about `size` bytes (no resources)."""
    pad = "x" * max(0, size - 120)
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "bench", "outputs": {}, "resources": [], "pad": pad}).encode()


def lock_body(lock_id):
    """Terraform's lock info with ID `lock_id`."""
    return json.dumps({"ID": lock_id, "Operation": "OperationTypeApply", "Info": "",
                       "Who": "bench@host", "Version": "1.15.5",
                       "Created": "2026-11-22T00:00:00Z", "Path": ""}).encode()


def dir_bytes(path):
    """Bytes of the files under `path`."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
