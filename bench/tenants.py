"""Noisy neighbours: does one tenant's backfill, or a flood of bad logins, slow another?

Starts a local stack (real etcd + moto S3, ``bench/common.py``) and two brokers with
users on (``LLOG_AUTH_USERS``). Tenant B (user ``b``) produces at a steady rate
(librdkafka, SASL/SCRAM-SHA-512, acks=all, 1 KiB records carrying their send time) and
consumes what it produced, throughout. Four phases of ``--phase-s`` seconds each:

1. ``alone``: B only;
2. ``quota``: tenant A (user ``a``, ``producer_byte_rate`` ``--quota-mib`` MiB/s) produces
   as fast as it can from ``--a-producers`` producers over both brokers (its quota is
   divided among the brokers serving it: docs/security.md, "Quotas");
3. ``logins``: 32 threads from 16 loopback addresses (127.0.0.2 to 127.0.0.17) send wrong
   passwords over SASL/SCRAM-SHA-512, SASL/PLAIN and HTTP Basic;
4. ``churn``: about ``--churn-rate`` connections a second opened and dropped, from the
   same 16 addresses.

Per phase: B's produce p99 (send to delivery report) and end-to-end p99 (send to
consume), against the bound ``1.5 * alone p99 + 20 ms``; A's produce rate and errors
(throttled, never refused); the failed logins and refused connections the brokers
counted. B must lose nothing. The last line is one JSON object with each phase's p99s
and ``b_p99_within_bound`` (true when every phase holds).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import socket
import struct
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

# Run as a file (python bench/tenants.py), sys.path[0] is this directory, where
# bench/kafka.py would shadow the kafka package: the repository root takes its place.
sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from bench.broker import broker_process, pct
from bench.common import MIB, LocalStack, bench_args, emit_json, print_table
from llog.auth.users import Users
from llog.connection import Connection
from llog.quotas.entities import PRODUCER_BYTE_RATE, QuotaEntity
from llog.quotas.store import QuotaStore
from llog.topic.admin import Topics
from tests.kafka_crafted import exchange

PASSWORDS = {"a": "a-secret", "b": "b-secret"}
TOPIC_A, TOPIC_B, PARTITIONS = "tenant-a", "tenant-b", 4
FLOOD_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 18)]
PHASES = ("alone", "quota", "logins", "churn")


def _sasl(bootstrap: str, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": PASSWORDS[user]}


class TenantB:
    """B's steady producer and its consumer: latencies by phase, and what was lost."""

    def __init__(self, bootstrap: str, rate: float) -> None:
        self.phase = "warmup"  # connecting, authenticating, the group's join: not measured
        self.produce_ms: dict[str, list[float]] = {p: [] for p in ("warmup", *PHASES)}
        self.e2e_ms: dict[str, list[float]] = {p: [] for p in ("warmup", *PHASES)}
        self._deadline = float("inf")
        self.sent = self.failed = self.received = 0
        self._rate, self._stop = rate, threading.Event()
        self._producer = confluent_kafka.Producer({**_sasl(bootstrap, "b"), "linger.ms": 2, "acks": "all",
                                                   "enable.idempotence": True})
        self._consumer = confluent_kafka.Consumer({**_sasl(bootstrap, "b"), "group.id": "tenant-b",
                                                   "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
        self._threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def __enter__(self) -> TenantB:
        self._consumer.subscribe([TOPIC_B])
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._threads[0].join()
        self._deadline = time.monotonic() + 60  # for the consumer to read the rest
        self._threads[1].join()
        self._consumer.close()

    def _produce(self) -> None:
        value = b"x" * 1000
        interval, next_at = 1.0 / self._rate, time.monotonic()
        while not self._stop.is_set():
            sent_at, phase = time.time(), self.phase

            def done(err: object, _msg: object, sent_at: float = sent_at, phase: str = phase) -> None:
                if err is not None:
                    self.failed += 1
                else:
                    self.produce_ms[phase].append((time.time() - sent_at) * 1000)

            self._producer.produce(TOPIC_B, value=struct.pack(">d", sent_at) + phase.encode().ljust(8) + value,
                                   on_delivery=done)
            self.sent += 1
            self._producer.poll(0)
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        self._producer.flush(60)

    def _consume(self) -> None:
        while not (self._stop.is_set() and not self._threads[0].is_alive()
                   and (self.received >= self.sent - self.failed or time.monotonic() > self._deadline)):
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            value = msg.value()
            sent_at = struct.unpack(">d", value[:8])[0]
            phase = value[8:16].decode().strip()
            self.e2e_ms[phase].append((time.time() - sent_at) * 1000)
            self.received += 1


def tenant_a(bootstrap: str, stop: threading.Event, out: dict[str, float]) -> None:
    """One of A's producers: as fast as its brokers let it, for the quota phase. What A
    got is what was delivered while the phase ran; a local queue of 4 MiB keeps what it
    holds back small, and what is still queued when the phase ends is dropped unsent
    (librdkafka's purge), not counted as an error."""
    p = confluent_kafka.Producer({**_sasl(bootstrap, "a"), "linger.ms": 5, "acks": "1", "batch.size": 262144,
                                  "queue.buffering.max.kbytes": 4096})
    value, delivered, errors = b"a" * 1024, [0], []
    t0, ended = time.monotonic(), [float("inf")]

    def done(err: Any, _msg: object) -> None:
        if err is None:
            if time.monotonic() <= ended[0]:
                delivered[0] += len(value)
        elif err.code() not in (confluent_kafka.KafkaError._PURGE_QUEUE, confluent_kafka.KafkaError._PURGE_INFLIGHT):
            errors.append(err)

    while not stop.is_set():
        try:
            p.produce(TOPIC_A, value=value, on_delivery=done)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    ended[0] = time.monotonic()
    p.purge(in_queue=True, in_flight=False)
    p.flush(60)
    out["bytes"] = out.get("bytes", 0.0) + delivered[0]
    out["seconds"] = max(out.get("seconds", 0.0), ended[0] - t0)
    out["errors"] = out.get("errors", 0.0) + len(errors)


def _ask(sock: socket.socket, request: Any, response: Any, version: int, correlation: int) -> Any:
    return response[version].decode(exchange(sock, request, correlation, "flood"), version=version, header=True)


def wrong_login(kind: str, source: str, kafka: tuple[str, int], http_url: str) -> None:
    """One failed login of ``kind`` (SCRAM, PLAIN, HTTP) from address ``source``."""
    if kind == "HTTP":
        host, port = http_url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
        try:
            token = base64.b64encode(b"b:" + secrets.token_hex(6).encode()).decode()
            conn.request("GET", "/offsets?group=g", headers={"authorization": f"Basic {token}"})
            conn.getresponse().read()
        finally:
            conn.close()
        return
    with socket.create_connection(kafka, timeout=10, source_address=(source, 0)) as sock:
        mechanism = "PLAIN" if kind == "PLAIN" else "SCRAM-SHA-512"
        _ask(sock, SaslHandshakeRequest[1](mechanism=mechanism), SaslHandshakeResponse, 1, 1)
        if kind == "PLAIN":
            plain = SaslAuthenticateRequest[2](auth_bytes=b"\0b\0" + secrets.token_hex(6).encode())
            _ask(sock, plain, SaslAuthenticateResponse, 2, 2)
            return
        nonce = secrets.token_urlsafe(18)
        first = _ask(sock, SaslAuthenticateRequest[2](auth_bytes=f"n,,n=b,r={nonce}".encode()),
                     SaslAuthenticateResponse, 2, 2)
        server_nonce = dict(kv.split("=", 1) for kv in bytes(first.auth_bytes).decode().split(","))["r"]
        proof = base64.b64encode(os.urandom(64)).decode()
        final = SaslAuthenticateRequest[2](auth_bytes=f"c=biws,r={server_nonce},p={proof}".encode())
        _ask(sock, final, SaslAuthenticateResponse, 2, 3)


def flood(kind: str, stop: threading.Event, kafka_ports: list[int], http_urls: list[str], counts: dict[str, int],
          index: int) -> None:
    kinds = ("SCRAM", "PLAIN", "HTTP")
    i = index
    while not stop.is_set():
        if kind == "churn":
            try:
                with socket.create_connection(("127.0.0.1", kafka_ports[i % len(kafka_ports)]), timeout=5,
                                              source_address=(FLOOD_ADDRESSES[i % len(FLOOD_ADDRESSES)], 0)):
                    pass
                counts["opened"] = counts.get("opened", 0) + 1
            except OSError:
                counts["refused"] = counts.get("refused", 0) + 1
            stop.wait(counts["interval"])
        else:
            try:
                wrong_login(kinds[i % 3], FLOOD_ADDRESSES[i % len(FLOOD_ADDRESSES)],
                            ("127.0.0.1", kafka_ports[i % len(kafka_ports)]), http_urls[i % len(http_urls)])
                counts["attempts"] = counts.get("attempts", 0) + 1
            except (OSError, ValueError, KeyError, struct.error):
                counts["closed"] = counts.get("closed", 0) + 1
        i += 32


def _metric(url: str, name: str, **labels: str) -> float:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    auth = base64.b64encode(f"b:{PASSWORDS['b']}".encode()).decode()
    conn.request("GET", "/metrics", headers={"authorization": f"Basic {auth}"})
    snap = json.loads(conn.getresponse().read())
    conn.close()
    return sum(s["value"] for s in snap.get(name, []) if all(s["labels"].get(k) == v for k, v in labels.items()))


def main() -> None:
    p = bench_args(__doc__.split("\n\n")[0])
    p.add_argument("--phase-s", type=float, default=None, help="seconds per phase (default 30; --quick 15)")
    p.add_argument("--b-rate", type=float, default=200.0, help="B's records a second")
    p.add_argument("--quota-mib", type=float, default=5.0, help="A's producer_byte_rate, MiB/s")
    p.add_argument("--a-producers", type=int, default=4)
    p.add_argument("--churn-rate", type=float, default=1000.0, help="connections a second in the churn phase")
    args = p.parse_args()
    phase_s = args.phase_s or (15.0 if args.quick else 30.0)
    with LocalStack() as stack, ExitStack() as procs:
        cfg = stack.config("s3")
        with Connection(cfg) as conn:
            for user, password in PASSWORDS.items():
                Users(conn).add(user, password, iterations=4096)
            Topics(conn).create(TOPIC_A, PARTITIONS)
            Topics(conn).create(TOPIC_B, PARTITIONS)
            QuotaStore(conn).alter([(QuotaEntity("a", None), {PRODUCER_BYTE_RATE: args.quota_mib * MIB})])
        brokers = [procs.enter_context(broker_process(cfg, None, "--kafka-port", "0",
                                                      env={"LLOG_AUTH_USERS": "true"})) for _ in range(2)]
        urls = [url for url, _ in brokers]
        ports = []
        for _, proc in brokers:
            assert proc.stdout is not None
            ports.append(int(proc.stdout.readline().rsplit(" ", 1)[1]))
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        a_out: dict[str, float] = {}
        flood_counts: dict[str, Any] = {"interval": 32 / args.churn_rate}
        with TenantB(bootstrap, args.b_rate) as b:
            time.sleep(5)
            b.phase = "alone"
            time.sleep(phase_s)
            for phase in PHASES[1:]:
                b.phase = phase
                stop = threading.Event()
                if phase == "quota":
                    workers = [threading.Thread(target=tenant_a, args=(bootstrap, stop, a_out))
                               for _ in range(args.a_producers)]
                else:
                    workers = [threading.Thread(target=flood, args=(phase, stop, ports, urls, flood_counts, i))
                               for i in range(32)]
                for w in workers:
                    w.start()
                time.sleep(phase_s)
                stop.set()
                for w in workers:
                    w.join()
            b.phase = "churn"
        failed_logins = sum(_metric(u, "llog_login_failures_total") for u in urls)
        refused = sum(_metric(u, "llog_kafka_connections_refused_total") for u in urls)
        throttles = sum(_metric(u, "llog_quota_throttles_total") for u in urls)
    alone = {k: pct(v["alone"], 0.99) for k, v in (("produce", b.produce_ms), ("e2e", b.e2e_ms))}
    rows, result = [], {}
    within = True
    for phase in PHASES:
        produce_p99, e2e_p99 = pct(b.produce_ms[phase], 0.99), pct(b.e2e_ms[phase], 0.99)
        bound_produce, bound_e2e = 1.5 * alone["produce"] + 20, 1.5 * alone["e2e"] + 20
        ok = produce_p99 <= bound_produce and e2e_p99 <= bound_e2e
        within = within and ok
        rows.append([phase, f"{produce_p99:.1f}", f"{bound_produce:.1f}", f"{e2e_p99:.1f}", f"{bound_e2e:.1f}",
                     "yes" if ok else "NO"])
        result[f"b_produce_p99_ms_{phase}"] = round(produce_p99, 1)
        result[f"b_e2e_p99_ms_{phase}"] = round(e2e_p99, 1)
    print_table(["phase", "B produce p99 ms", "bound", "B e2e p99 ms", "bound", "within"], rows)
    a_rate = a_out.get("bytes", 0.0) / MIB / max(a_out.get("seconds", 1.0), 1e-9)
    print(f"A: {a_rate:.2f} MiB/s against a quota of {args.quota_mib} MiB/s, {a_out.get('errors', 0):.0f} errors, "
          f"{throttles:.0f} throttled answers; logins flood: {flood_counts.get('attempts', 0)} wrong logins sent, "
          f"{failed_logins:.0f} counted failed; churn: {flood_counts.get('opened', 0)} connections opened, "
          f"{refused:.0f} refused; B: {b.sent} sent, {b.failed} failed, {b.received} consumed")
    emit_json({**result, "b_p99_within_bound": within, "b_sent": b.sent, "b_lost": b.sent - b.failed - b.received,
               "b_failed": b.failed, "a_mib_s": round(a_rate, 2), "a_quota_mib_s": args.quota_mib,
               "a_within_10pct": abs(a_rate - args.quota_mib) <= 0.1 * args.quota_mib,
               "a_errors": int(a_out.get("errors", 0)), "a_throttled_answers": int(throttles),
               "failed_logins": int(failed_logins), "connections_refused": int(refused), "phase_s": phase_s})


if __name__ == "__main__":
    main()
