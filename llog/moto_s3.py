"""moto's S3 service served alone: the dev stack's and the suite's object store.

``python -m moto.server`` serves every AWS service moto has: each request is matched to
a service by listing moto's package directory and by regular expressions, through a
Flask app in debug mode, which took about 40 % of the server's CPU per S3 request. This
serves moto's S3 app (the same storage and the same answers) without that dispatch.

    python -m llog.moto_s3 --host 127.0.0.1 --port 9000
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


def make_app() -> Any:
    """moto's S3 WSGI app, debug off (debug adds per-request checks)."""
    from moto.moto_server.werkzeug_app import create_backend_app

    app = create_backend_app("s3")
    app.debug = False
    return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m llog.moto_s3", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    from werkzeug.serving import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            """One line per request would be most of a test's log."""

    server = make_server(args.host, args.port, make_app(), threaded=True, request_handler=QuietHandler)

    def stop(_sig: int, _frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()  # shutdown waits for the loop

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("moto S3 on %s:%d", args.host, args.port)
    server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
