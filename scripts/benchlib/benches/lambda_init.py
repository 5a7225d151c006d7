"""Lambda cold init: process start -> first response of the gitstate-lambda bootstrap.

Serves the Lambda Runtime API's two calls the bootstrap makes on loopback (next invocation: a
Function URL event for GET /_/health; its response), starts the bootstrap built by
`cargo lambda build --release -p gitstate-lambda`, and measures the time from spawning the
process to receiving its response. Repeats --runs times; prints median and min-max. Each run
has a cache directory of its own that does not exist yet, as a new container's /tmp is empty.

Also prints the bootstrap's size and the size of the zip `sam build` deploys.

Usage: scripts/bench lambda-init [--runs 20] [--bootstrap PATH] [--artifact PATH]
"""
import http.server
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import zipfile

from benchlib import support as s

EVENT = {
    "version": "2.0",
    "routeKey": "$default",
    "rawPath": "/_/health",
    "rawQueryString": "",
    "headers": {"host": "example.lambda-url.us-east-1.on.aws"},
    "requestContext": {
        "accountId": "anonymous", "apiId": "example", "domainName": "example.lambda-url.us-east-1.on.aws",
        "domainPrefix": "example", "requestId": "bench", "routeKey": "$default", "stage": "$default",
        "time": "22/Nov/2026:00:00:00 +0000", "timeEpoch": 0,
        "http": {"method": "GET", "path": "/_/health", "protocol": "HTTP/1.1",
                 "sourceIp": "127.0.0.1", "userAgent": "bench"},
    },
    "isBase64Encoded": False,
}


class Runtime(http.server.BaseHTTPRequestHandler):
    """The Runtime API: one invocation, then long polls; records the response's arrival."""
    served = False
    responded = None

    def log_message(self, *args):
        """Quiet."""

    def do_GET(self):
        """Next invocation: the event once, then a slow 500 (the bootstrap long-polls)."""
        if self.path.endswith("/invocation/next") and not Runtime.served:
            Runtime.served = True
            body = json.dumps(EVENT).encode()
            self.send_response(200)
            self.send_header("Lambda-Runtime-Aws-Request-Id", "bench-request")
            self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30000))
            self.send_header("Lambda-Runtime-Invoked-Function-Arn",
                             "arn:aws:lambda:us-east-1:000000000000:function:gitstate")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            time.sleep(5)
            self.send_response(500)
            self.end_headers()

    def do_POST(self):
        """The invocation's response (or an error report)."""
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length)
        if "/response" in self.path:
            Runtime.responded = (time.perf_counter(), payload)
        self.send_response(202)
        self.end_headers()


def add_arguments(parser):
    """--runs, --bootstrap, --artifact."""
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--bootstrap", default=os.path.join(s.TARGET, "lambda", "gitstate-lambda", "bootstrap"))
    parser.add_argument("--artifact", help="the file sized and zipped, when --bootstrap is a wrapper that runs it "
                        "(arm64 under qemu); default: the bootstrap itself")


def one_init(bootstrap):
    """Milliseconds from spawning the bootstrap to its response."""
    port = s.free_port()
    Runtime.served, Runtime.responded = False, None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Runtime)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="gitstate-bench-init-")
    env = dict(os.environ, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{port}",
               AWS_LAMBDA_FUNCTION_NAME="gitstate", AWS_LAMBDA_FUNCTION_VERSION="1",
               AWS_LAMBDA_FUNCTION_MEMORY_SIZE="1024",
               GITSTATE_REPOSITORY="default=https://git.example.invalid/states.git",
               GITSTATE_CACHE_DIR=os.path.join(tmp, "cache"), RUST_LOG="warn")
    output = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = s.spawn([bootstrap], env=env, stdout=output, stderr=output)
    deadline = start + 10
    while Runtime.responded is None and time.perf_counter() < deadline and proc.poll() is None:
        time.sleep(0.0005)
    exited = proc.poll()
    proc.kill()
    s.stop(proc)
    server.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    if Runtime.responded is None:
        output.seek(0)
        said = output.read()[-2000:].decode(errors="replace")
        how = f"it exited with {exited}" if exited is not None else "it was still running after 10 s"
        raise SystemExit(f"the bootstrap did not answer ({how}); it said:\n{said}")
    answered, payload = Runtime.responded
    if b'"statusCode":200' not in payload.replace(b" ", b""):
        raise SystemExit(f"unexpected response: {payload[:300]!r}")
    return (answered - start) * 1000


def zipped_size(bootstrap):
    """Bytes of the deployment package `sam build` makes of the bootstrap: a zip holding it as
    `bootstrap`, deflated (Python's zipfile, as SAM writes it)."""
    with tempfile.TemporaryDirectory() as tmp:
        package = os.path.join(tmp, "function.zip")
        with zipfile.ZipFile(package, "w", zipfile.ZIP_DEFLATED) as z:
            z.write(bootstrap, "bootstrap")
        return os.path.getsize(package)


def run(args):
    """--runs cold inits, then the summary."""
    samples = [one_init(args.bootstrap) for _ in range(args.runs)]
    artifact = args.artifact or args.bootstrap
    size = os.path.getsize(artifact)
    print(f"bootstrap {artifact}: {size} bytes, zipped (the deployment package) {zipped_size(artifact)} bytes")
    print(f"cold init (spawn -> first response), {args.runs} runs: median {statistics.median(samples):.1f} ms "
          f"(min {min(samples):.1f}, max {max(samples):.1f})")
