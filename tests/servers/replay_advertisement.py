#!/usr/bin/env python3
"""A tiny smart-HTTP git server that replays the advertisement of issue 16.

It sits in front of a real smart-HTTP server (lighttpd + `git http-backend`, see `GitHttpServer` in
tests/src/lib.rs) and forwards every request to it unchanged, except two:

* `GET …/info/refs?service=git-receive-pack`: the advertisement is rebuilt the way a server that is
  not git's own answers it (issue 16): no `HEAD` line, the refs the backend has (or, when it has
  none, the line `0000… capabilities^{}`), and the capability list given with `--receive-caps`,
  whose default is the issue's, byte for byte:

      report-status delete-refs quiet atomic ofs-delta side-band-64k no-done object-format=sha1
      symref=HEAD:refs/heads/master

* `GET …/info/refs?service=git-upload-pack`: the same shape (no `HEAD` line, `capabilities^{}`
  on an empty repository); the capabilities are the backend's own (it does the fetch) with every
  `symref=` and `agent=` replaced by `symref=HEAD:<--symref-target>`.

Like the issue's server, a space follows the NUL before the first capability. The `Git-Protocol`
and `Accept-Encoding` request headers are dropped, so the backend always answers protocol v0 (what
this server speaks; a server may ignore the header), uncompressed. Every request is logged to stdout as
`METHOD TARGET -> STATUS`, and every replayed advertisement as `replayed SERVICE: <pkt-lines>`.

    replay_advertisement.py --port PORT --backend http://127.0.0.1:BACKEND_PORT
                            [--receive-caps CAPS] [--symref-target REF]

Python standard library only; binds 127.0.0.1.
"""

import argparse
import http.client
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ISSUE_RECEIVE_CAPS = (
    "report-status delete-refs quiet atomic ofs-delta side-band-64k no-done "
    "object-format=sha1 symref=HEAD:refs/heads/master"
)
ZERO_ID = b"0" * 40
HOP_BY_HOP = {
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "git-protocol",
    "accept-encoding",
    "proxy-connection",
    "te",
    "upgrade",
}


def pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def read_pkts(data: bytes):
    """Yields each pkt-line's payload; None for a flush-pkt."""
    i = 0
    while i + 4 <= len(data):
        size = int(data[i : i + 4], 16)
        if size == 0:
            yield None
            i += 4
            continue
        if size < 4:
            raise ValueError("bad pkt-line length %d" % size)
        yield data[i + 4 : i + size]
        i += size
    if i != len(data):
        raise ValueError("trailing bytes after the last pkt-line")


def rewrite(service: str, body: bytes, receive_caps: str, symref_target: str) -> bytes:
    """The backend's v0 advertisement → the issue-16 shape."""
    pkts = list(read_pkts(body))
    if len(pkts) < 3 or pkts[0] is None or not pkts[0].startswith(b"# service="):
        raise ValueError("not a smart-HTTP v0 advertisement: %r" % body[:80])
    refs = []
    backend_caps = []
    for i, payload in enumerate(pkts[2:]):
        if payload is None:
            break
        line = payload.rstrip(b"\n")
        if i == 0 and b"\0" in line:
            line, caps = line.split(b"\0", 1)
            backend_caps = caps.decode().split()
        oid, name = line.split(b" ", 1)
        if name in (b"HEAD", b"capabilities^{}"):
            continue
        refs.append((oid, name))
    if service == "git-receive-pack":
        caps = receive_caps
    else:
        kept = [c for c in backend_caps if not c.startswith(("symref=", "agent="))]
        caps = " ".join(kept + ["symref=HEAD:" + symref_target])
    out = pkt(pkts[0]) + b"0000"
    if not refs:
        out += pkt(ZERO_ID + b" capabilities^{}\0 " + caps.encode() + b"\n")
    for i, (oid, name) in enumerate(refs):
        if i == 0:
            out += pkt(oid + b" " + name + b"\0 " + caps.encode() + b"\n")
        else:
            out += pkt(oid + b" " + name + b"\n")
    return out + b"0000"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "replay-advertisement/1"

    def log_message(self, fmt, *args):  # the access log is ours (stdout), not stderr's
        pass

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def forward(self):
        body = self.read_body()
        cfg = self.server.cfg
        conn = http.client.HTTPConnection(cfg.backend_host, cfg.backend_port, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = "%s:%d" % (cfg.backend_host, cfg.backend_port)
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        status, reason = resp.status, resp.reason
        out_headers = [
            (k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP
        ]
        conn.close()

        url = urllib.parse.urlsplit(self.path)
        service = urllib.parse.parse_qs(url.query).get("service", [""])[0]
        if (
            self.command == "GET"
            and url.path.endswith("/info/refs")
            and service in ("git-upload-pack", "git-receive-pack")
            and status == 200
        ):
            data = rewrite(service, data, cfg.receive_caps, cfg.symref_target)
            out_headers = [(k, v) for k, v in out_headers if k.lower() != "content-type"]
            out_headers.append(("Content-Type", "application/x-%s-advertisement" % service))
            print("replayed %s: %s" % (service, data.decode("latin-1").replace("\0", "\\0")), flush=True)

        self.send_response(status, reason)
        for k, v in out_headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        print("%s %s -> %d" % (self.command, self.path, status), flush=True)

    def handle_one(self):
        try:
            self.forward()
        except Exception as e:  # noqa: BLE001 - say it, don't hang up silently
            print("error on %s %s: %r" % (self.command, self.path, e), flush=True)
            message = ("replay proxy error: %r\n" % e).encode()
            self.send_response(502)
            self.send_header("Content-Length", str(len(message)))
            self.end_headers()
            self.wfile.write(message)

    def do_GET(self):
        self.handle_one()

    def do_POST(self):
        self.handle_one()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", required=True, help="http://127.0.0.1:PORT of the real server")
    p.add_argument("--receive-caps", default=ISSUE_RECEIVE_CAPS)
    p.add_argument("--symref-target", default="refs/heads/master")
    cfg = p.parse_args()
    backend = urllib.parse.urlsplit(cfg.backend)
    cfg.backend_host, cfg.backend_port = backend.hostname, backend.port
    server = ThreadingHTTPServer(("127.0.0.1", cfg.port), Handler)
    server.daemon_threads = True
    server.cfg = cfg
    print("listening on 127.0.0.1:%d, replaying in front of %s" % (cfg.port, cfg.backend), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
