"""``llog dev up`` (a local etcd + object store + broker until Ctrl-C) and ``llog demo``
(the whole system once, step by step: :mod:`llog.demo`)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from llog.cli import values
from llog.devstack import BrokerProcess, LocalStack
from llog.kafka.client_settings import PRODUCER


def register(subparsers: Any) -> None:
    dev = subparsers.add_parser("dev", help="local development stack")
    dsub = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    p = dsub.add_parser("up", help="run etcd and an object store on loopback until Ctrl-C")
    p.add_argument("--s3", action="store_true", help="serve objects from a local S3 server (moto), not a directory")
    p.add_argument(
        "--s3-latency", metavar="PROFILE",
        help="put the nemesis S3 proxy in front of the S3 server (implies --s3) with this latency "
        "profile: standard, express, none or fixed:<ms> (docs/nemesis.md)",
    )
    p.add_argument("--dir", type=Path, help="working directory (default: a new temp dir)")
    p.add_argument("--env-file", type=Path, help="also write the LLOG_* variables to this file")
    p.add_argument("--broker-port", type=values.listen_port, default=8080,
                   help="HTTP broker port (default 8080, 0: any free)")
    p.add_argument("--kafka-port", type=values.listen_port, default=9092,
                   help="the broker's Kafka listener port (default 9092, 0: any free; docs/kafka.md)")
    p.add_argument("--no-kafka", action="store_true", help="no Kafka listener on the broker")
    p.add_argument("--no-broker", action="store_true", help="do not start an HTTP broker")
    p.add_argument("--no-auto-create", action="store_true",
                   help="the broker refuses unknown topics (by default it creates them on first use, as a "
                        "default Kafka broker does: LLOG_AUTO_CREATE_TOPICS)")
    p.add_argument("--zones", type=_zones, default=(),
                   help="a broker per zone, comma separated (a,b,c): the first on the ports above, the next on "
                        "the ports after them (docs/zones.md)")
    p.set_defaults(func=_up)

    p = subparsers.add_parser(
        "demo", help="the whole system on this machine: produce, a consumer group, compaction, Spark; then stop"
    )
    p.add_argument("--s3", action="store_true", help="use a local S3 server (moto) instead of a directory")
    p.add_argument("--records", type=values.positive_int, default=20_000, help="records to write (default 20000)")
    p.add_argument("--partitions", type=values.partition_count, default=4)
    p.add_argument("--no-spark", action="store_true", help="skip the Spark step even when Java and PySpark are there")
    p.set_defaults(func=_demo)


def _zones(text: str) -> tuple[str, ...]:
    zones = tuple(values.zone(z.strip()) for z in text.split(","))
    if len(set(zones)) < len(zones):
        raise argparse.ArgumentTypeError(f"a zone named twice in {text!r}")
    return zones


def _next_port(port: int, i: int) -> int:
    return port + i if port else 0


def _up(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalStack(args.dir, s3=args.s3, s3_latency=args.s3_latency) as stack:
        env = stack.env()
        broker_env = env if args.no_auto_create else {**env, "LLOG_AUTO_CREATE_TOPICS": "true"}
        brokers: list[BrokerProcess] = []
        try:
            for i, zone in enumerate(args.zones or (None,)):
                if args.no_broker:
                    break
                brokers.append(BrokerProcess(
                    broker_env if zone is None else {**broker_env, "LLOG_ZONE": zone},
                    _next_port(args.broker_port, i), None if args.no_kafka else _next_port(args.kafka_port, i)))
            broker = brokers[0] if brokers else None
            lines = [f"export {k}={v}" for k, v in sorted(env.items())]
            if stack.s3_proxy is not None and stack.s3 is not None:
                lines.append(f"# S3 proxy: {stack.s3_proxy.endpoint_url} -> {stack.s3.endpoint_url}, latency "
                             f"{stack.s3_proxy.latency}; control: {stack.s3_proxy.endpoint_url}/_nemesis/state")
            if broker is not None:
                lines.append(f"# broker: {broker.url}  (POST /produce, /consume; GET /openapi.json)"
                             + ("" if args.no_auto_create else "; topics are created on first use"))
            if broker is not None and broker.kafka_bootstrap is not None:
                lines.append(f"# Kafka bootstrap servers: {broker.kafka_bootstrap}  (docs/kafka.md)")
                lines.append("# Kafka clients notice a stopped broker in seconds with (librdkafka names; "
                             "llog.kafka.client_settings): " + " ".join(f"{k}={v}" for k, v in PRODUCER.items()))
            for zone, b in zip(args.zones, brokers, strict=False):
                kafka = "" if b.kafka_bootstrap is None else f", Kafka {b.kafka_bootstrap}"
                lines.append(f"# zone {zone}: broker {b.url}{kafka}  (client.id=...,llog_zone={zone}; docs/zones.md)")
            if args.env_file:
                args.env_file.write_text("\n".join(lines) + "\n")
            print("\n".join(lines), flush=True)
            kept = "kept" if args.dir else "removed"
            print(f"# llog dev stack in {stack.workdir} ({kept} when it stops); Ctrl-C stops it",
                  file=sys.stderr, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while not stop.wait(0.5):
                    for b in brokers:
                        if b.proc.poll() is not None:
                            print(f"# broker {b.url} exited with {b.proc.returncode}", file=sys.stderr)
                            return 1
        finally:
            for b in brokers:
                b.stop()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from llog.demo import run

    return run(s3=args.s3, records=args.records, partitions=args.partitions, spark=not args.no_spark)
