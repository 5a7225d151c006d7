#!/usr/bin/env python3
"""dulwich's smart-HTTP server for tests/tests/interop.rs.

The same program as dulwich's own `python -m dulwich.web -l ADDRESS -p PORT GITDIR` (dulwich.web's
WSGI application on wsgiref, where dulwich.server implements upload-pack and receive-pack in
Python, no git process involved), but serving the repository at /git/NAME.git instead of at the
server's root: gitstate wants a URL with a repository path, and `dulwich web-daemon`, which
serves a directory, cannot open any repository (1.2.21 joins the URL path to its root as an
absolute path: "Path '/states.git' not inside root").

    dulwich_http_server.py PORT GITDIR NAME

Run it with the Python of the venv scripts/install-test-deps.sh makes. Binds 127.0.0.1; logs one
line per request to stderr.
"""

import sys
from wsgiref.simple_server import make_server

import dulwich
from dulwich import log_utils
from dulwich.repo import Repo
from dulwich.server import DictBackend
from dulwich.web import WSGIRequestHandlerLogger, WSGIServerLogger, make_wsgi_chain


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    port, gitdir, name = int(argv[1]), argv[2], argv[3]
    log_utils.default_logging_config()
    backend = DictBackend({"/git/%s.git" % name: Repo(gitdir)})
    server = make_server(
        "127.0.0.1",
        port,
        make_wsgi_chain(backend),
        handler_class=WSGIRequestHandlerLogger,
        server_class=WSGIServerLogger,
    )
    print(
        "dulwich %s listening on http://127.0.0.1:%d/git/%s.git"
        % (".".join(map(str, dulwich.__version__)), port, name),
        flush=True,
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
