"""``python -m llog.nemesis --upstream URL [--port N] [--latency standard] [--seed S]
[--faults PLAN.json]``: run an S3 proxy until SIGTERM or Ctrl-C. Prints
``llog s3 proxy listening on <url>`` once it accepts connections."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from pathlib import Path

from llog.nemesis.faults import FaultPlan
from llog.nemesis.latency import PROFILES
from llog.nemesis.s3_proxy import S3Proxy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llog.nemesis", description=__doc__)
    p.add_argument("--upstream", required=True, help="the S3 server's URL (http://host:port)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="listen port (0: a free one)")
    p.add_argument("--latency", default="none", help=f"latency profile: {', '.join(PROFILES)} or fixed:<ms>")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--faults", type=Path, help="a fault plan JSON file ({\"rules\": [...]})")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = FaultPlan.from_json(json.loads(args.faults.read_text())) if args.faults else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with S3Proxy(args.upstream, host=args.host, port=args.port, latency=args.latency, seed=args.seed,
                 plan=plan) as proxy:
        print(f"llog s3 proxy listening on {proxy.url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
