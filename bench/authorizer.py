"""What the authorizer costs: produce through a broker with ``LLOG_AUTH_ACLS`` on and
1,000 ACLs in etcd, against the same broker settings with it off, in one interleaved run.

Starts a local stack (real etcd + moto S3, ``bench/common.py``) and two brokers, both
with users on (``LLOG_AUTH_USERS``: the clients authenticate the same way to both, so
only the authorizer differs), one with the authorizer and 1,000 ACLs — 999 for other
principals and topics (literal, prefixed, allow and deny) and the one that lets the
bench's user write its topic. Measured, alternating which broker goes first each run:

- HTTP: ``wrk`` (C) POSTing single-record ``/produce`` requests over ``--connections``
  connections with HTTP Basic credentials — the per-request path, where a check weighs
  most: requests/s (and any answer but 200 fails the bench);
- Kafka: confluent-kafka, SASL SCRAM-SHA-512, idempotent, acks=all, 1 KiB records:
  records/s.

Both brokers run on a ``file://`` store with no PUT budget (``--put-rate 0``), so they are
bound by their own CPU, which is what the authorizer could take. Needs ``wrk``.

Ratios are medians of per-run ratios (on / off); the issue's target is ≥ 0.95. The last
line is one JSON object.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.broker import broker_process
from bench.common import LocalStack, bench_args, emit_json, median, print_table, ratio
from bench.kafka import PARTITIONS, kafka_produce
from bench.workers import wrk
from llog.auth.acl_store import AclStore
from llog.auth.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from llog.auth.users import Users
from llog.connection import Connection
from llog.topic.admin import Topics

USER, PASSWORD, TOPIC = "bench", "bench-secret", "b"

_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "%s"
local value = string.rep("x", 100)
request = function()
  local body = '{"topic_partitions":[{"topic":"%s","partition":' .. math.random(0, %d) ..
               ',"records":["' .. value .. '"]}]}'
  return wrk.format(nil, "/produce", nil, body)
end
"""


def decoy_acls(n: int) -> list[AclBinding]:
    """``n`` ACLs that do not apply to the bench's user and topic, of every kind."""
    out = []
    ops = (Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL)
    for i in range(n):
        rtype = (ResourceType.TOPIC, ResourceType.GROUP)[i % 2]
        pattern = PatternType.PREFIXED if i % 5 == 0 else PatternType.LITERAL
        name = f"team{i % 50}.{'events' if pattern == PatternType.LITERAL else ''}{i}"
        permission = Permission.DENY if i % 17 == 0 else Permission.ALLOW
        out.append(AclBinding(rtype, name, pattern, f"User:app{i % 200}", "*", ops[i % 4], permission))
    return out


def main() -> None:
    p = bench_args(__doc__ or "")
    p.add_argument("--acls", type=int, default=1000, help="ACLs in etcd (one of them the bench user's)")
    p.add_argument("--connections", type=int, default=64)
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/authorizer.py needs wrk (Debian: apt-get install wrk)")
    runs = args.runs or (5 if args.quick else 9)
    seconds = 3.0 if args.quick else 8.0
    records = 20_000 if args.quick else 100_000
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": PASSWORD}

    with LocalStack() as stack, tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "produce.lua"
        script.write_text(_SCRIPT % (basic, TOPIC, PARTITIONS - 1))
        # Two deployments (root prefixes) on one stack: each broker its own Kafka cluster,
        # so a client of one never produces to the other.
        cfgs = {which: replace(stack.config("file"), root_prefix=f"authz-{which}") for which in ("off", "on")}
        for cfg in cfgs.values():
            with Connection(cfg) as conn:
                Topics(conn).create(TOPIC, PARTITIONS)
                Users(conn).add(USER, PASSWORD)
                AclStore(conn).add([*decoy_acls(args.acls - 1), AclBinding(
                    ResourceType.TOPIC, TOPIC, PatternType.LITERAL, f"User:{USER}", "*", Operation.WRITE,
                    Permission.ALLOW)])
        users = {"LLOG_AUTH_USERS": "true"}
        args_ = ("--kafka-port", "0", "--put-rate", "0")
        with broker_process(cfgs["off"], None, *args_, env=users) as (url_off, proc_off), broker_process(
            cfgs["on"], None, *args_, env={**users, "LLOG_AUTH_ACLS": "true"}
        ) as (url_on, proc_on):
            brokers = {"off": (_bootstrap(proc_off), url_off), "on": (_bootstrap(proc_on), url_on)}
            for boot, url in brokers.values():  # warm: connections, partition caches, the decision memo
                _http_rate(url, script, 1.0, args.connections)
                kafka_produce(boot, TOPIC, 2_000, 1024, sasl)
            http: dict[str, list[float]] = {"off": [], "on": []}
            kafka: dict[str, list[float]] = {"off": [], "on": []}
            for run in range(runs):
                for which in ("off", "on") if run % 2 == 0 else ("on", "off"):
                    boot, url = brokers[which]
                    http[which].append(_http_rate(url, script, seconds, args.connections))
                    kafka[which].append(records / kafka_produce(boot, TOPIC, records, 1024, sasl))
                print(f"run {run + 1}: HTTP {http['on'][-1] / http['off'][-1]:.3f}, "
                      f"Kafka {kafka['on'][-1] / kafka['off'][-1]:.3f} (on / off)", flush=True)

    # Each run's figure against the other broker's in the same run.
    http_ratio = median([ratio(on, off) for on, off in zip(http["on"], http["off"], strict=True)])
    kafka_ratio = median([ratio(on, off) for on, off in zip(kafka["on"], kafka["off"], strict=True)])
    print_table(("produce", "authorizer off", f"on, {args.acls} ACLs", "on / off"), [
        ("HTTP single-record requests/s", f"{median(http['off']):,.0f}", f"{median(http['on']):,.0f}",
         f"{http_ratio:.3f}"),
        ("Kafka 1 KiB records/s (SCRAM)", f"{median(kafka['off']):,.0f}", f"{median(kafka['on']):,.0f}",
         f"{kafka_ratio:.3f}"),
    ])
    emit_json({"acls": args.acls, "runs": runs, "http_requests_s_off": round(median(http["off"])),
               "http_requests_s_on": round(median(http["on"])), "authorizer_http_produce_ratio": round(http_ratio, 3),
               "kafka_records_s_off": round(median(kafka["off"])), "kafka_records_s_on": round(median(kafka["on"])),
               "authorizer_kafka_produce_ratio": round(kafka_ratio, 3)})


def _bootstrap(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "Kafka listener on port " not in line:
        raise RuntimeError(f"broker did not start its Kafka listener: {line!r}")
    return f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}"


def _http_rate(url: str, script: Path, seconds: float, connections: int) -> float:
    rate, _p50, _p99, failed, _cores, _idle = wrk(url, script, seconds, connections)
    if failed:
        raise RuntimeError(f"{failed} produce requests were not answered 200 by {url}")
    return rate


if __name__ == "__main__":
    main()
