"""Apache Kafka itself, from the jars the suite fetches (:mod:`tests.java_client`): a
one-node KRaft broker on loopback ports, the peer llog is measured against
(``bench/kafka_peer.py``, ``bench/txn_peer.py``) and the source MirrorMaker 2 mirrors
from (``tests/test_mirror_maker.py``)."""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from llog.local_ports import free_port


@contextmanager
def apache_kafka(workdir: Path, classpath: str, heap: str = "1g") -> Iterator[tuple[str, int]]:
    """A one-node KRaft Kafka on loopback ports (``heap``: its JVM's heap): its
    bootstrap address and pid."""
    port, controller = free_port(), free_port()
    data = workdir / "kafka"
    props = data / "server.properties"
    data.mkdir(parents=True)
    props.write_text("\n".join((
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", f"log.dirs={data / 'logs'}",
        "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", "",
    )))
    java = ["java", f"-Xms{heap}", f"-Xmx{heap}", "-cp", classpath]
    format_storage(java, new_cluster_id(), props)
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=log, stderr=subprocess.STDOUT)
    try:
        await_listening("127.0.0.1", port, proc, data / "server.log")
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM a JVM, SIGKILL it if it has not exited within 60 s."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def new_cluster_id() -> str:
    """A KRaft cluster id, as Kafka's ``Uuid.randomUuid``: never with a leading '-',
    which StorageTool would read as an option."""
    cluster = "-"
    while cluster.startswith("-"):
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster


def format_storage(java: list[str], cluster: str, props: Path) -> None:
    """``kafka-storage.sh format`` of the node ``props`` configures, into ``cluster``."""
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(props)],
                   check=True, capture_output=True, timeout=120)


def await_listening(host: str, port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120) -> None:
    """Until the Kafka node ``proc`` accepts connections at ``host:port``; its log's tail
    in the error if it exits first."""
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Kafka exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"Kafka not listening on {host}:{port} after {timeout_s:.0f} s")
