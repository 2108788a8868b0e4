"""``llog broker``: the HTTP produce/consume API (see ``GET /openapi.json``)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from llog.cli import values
from llog.cli.common import config_from_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "broker", help="run the HTTP broker",
        description="Serve POST /produce, /consume and /commit and GET /offsets (plus /health, /metrics, "
                    "/metrics/prometheus, /openapi.json) until Ctrl-C. A bearer token is required when "
                    "LLOG_BROKER_TOKEN is set.",
    )
    p.add_argument("--host", type=values.host, help="listen address, IPv4 or IPv6 (LLOG_BROKER_HOST)")
    p.add_argument("--port", type=values.listen_port, help="listen port, 0 for any free one (LLOG_BROKER_PORT)")
    p.add_argument("--max-request-bytes", type=values.positive_int,
                   help="largest request body accepted, 413 beyond (LLOG_BROKER_MAX_REQUEST_BYTES)")
    p.add_argument("--send-timeout", type=values.seconds,
                   help="seconds a produce waits for room in the batch buffer before 503 (LLOG_BROKER_SEND_TIMEOUT_S)")
    p.add_argument("--put-rate", type=values.rate_or_zero,
                   help="WAL PUTs per second a lightly loaded broker holds to, 0 for none (LLOG_BROKER_PUT_RATE, "
                        "default 4; see docs/broker.md, 'What a broker costs')")
    p.add_argument("--put-burst", type=values.positive_int,
                   help="PUTs the budget saves up while quiet (LLOG_BROKER_PUT_BURST, default 240)")
    p.add_argument("--workers", type=values.workers,
                   help="processes serving this broker's ports, 'auto' for one per core (LLOG_BROKER_WORKERS, "
                        "default 1; see docs/broker.md, 'Every core of a host')")
    p.add_argument("--kafka-port", type=values.listen_port,
                   help="also serve the Kafka protocol on this port, 0 for any free one (LLOG_KAFKA_PORT)")
    p.add_argument("--kafka-advertised-host", type=values.host,
                   help="host name clients are told to reach this broker's Kafka listener at "
                        "(LLOG_KAFKA_ADVERTISED_HOST; default: the listen address)")
    p.add_argument("--kafka-zone-listener", type=values.zone_listener, action="append", metavar="ZONE=PORT",
                   help="also serve Kafka on this port for the clients of ZONE: a client connected to it is in "
                        "that zone (AZ-aware listeners); repeat for each zone (LLOG_KAFKA_ZONE_LISTENERS; "
                        "docs/zones.md)")
    p.add_argument("--zone", type=values.zone,
                   help="the zone (availability zone, rack) this broker runs in: clients of a zone are sent to "
                        "its brokers, peer reads stay in it (LLOG_ZONE; docs/zones.md)")
    p.add_argument("--tail-cache-bytes", type=values.non_negative_int,
                   help="bytes of recently written records kept for tail consumers (LLOG_TAIL_CACHE_BYTES)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from llog.broker.launch import serve
    from llog.gc_tuning import tune_gc

    def ready(url: str, kafka_port: int | None) -> None:
        tune_gc(config.gc_threshold)  # after start-up: its objects are frozen
        print(f"llog broker listening on {url}", flush=True)
        if kafka_port is not None:
            print(f"llog Kafka listener on port {kafka_port}", flush=True)
        if config.broker_workers > 1:
            print(f"llog broker serving with {config.broker_workers} worker processes", flush=True)
        for listener in config.kafka_zone_listeners:  # what was asked for (port 0: the registration has it)
            print(f"llog Kafka listener for zone {listener.replace('=', ' on port ')}", flush=True)

    # The flags win over the LLOG_* settings; replace() validates them again.
    flags = {"broker_max_request_bytes": args.max_request_bytes, "broker_send_timeout_s": args.send_timeout,
             "tail_cache_bytes": args.tail_cache_bytes, "kafka_port": args.kafka_port,
             "kafka_advertised_host": args.kafka_advertised_host, "broker_put_rate": args.put_rate,
             "broker_put_burst": args.put_burst, "broker_workers": args.workers, "zone": args.zone,
             "kafka_zone_listeners": None if args.kafka_zone_listener is None else tuple(args.kafka_zone_listener)}
    config = replace(config_from_args(args), **{k: v for k, v in flags.items() if v is not None})
    return serve(config, host=args.host, port=args.port, on_ready=ready)
