"""Scheduled faults (the nemesis) at set times after the load starts.

* ``kill``: ``kill -9`` a broker, the compactor or etcd (one member, the current
  leader, or every member), and start it again ``restart_after_s`` later (same ports,
  same data, same log);
* ``pause``: ``SIGSTOP`` a broker, the compactor or an etcd member for ``duration_s``
  (longer than the session TTL, the claim TTL and the vacuum grace, to play a GC pause
  or a VM freeze), then ``SIGCONT``;
* ``faults``: the S3 proxy in front of the object store injects one kind of fault
  (5xx, timeouts, slow responses, connections dropped mid-body) into a share of the
  requests for ``duration_s``;
* ``partition``: every packet between ``target`` and ``peer`` (one way only with
  ``one_way``) is dropped for ``duration_s``, then the network heals
  (:mod:`llog.nemesis.network`; the cluster's processes in namespaces of their own);
* ``clean-restart``: stop a broker or the compactor (SIGTERM: a broker drains) and start
  it again as it was (a rolling restart);
* ``upgrade`` / ``rollback``: stop a broker or the compactor (SIGTERM) and start it
  again on this tree / on ``cluster.release`` (a rolling upgrade, one member a step);
  ``finalize``: raise the cluster's format, as ``llog upgrade finalize`` does.

A member's clock skew is not an event: it runs under libfaketime from the start
(:class:`llog.loadtest.scenario.ClusterSpec`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import signal
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from llog.connection import Connection
from llog.devstack import EtcdServer, LocalStack, etcd_nodes
from llog.errors import LlogError
from llog.loadtest.process import ManagedProcess
from llog.loadtest.scenario import STOP_START_ACTIONS, ChaosEvent
from llog.nemesis.network import CLIENTS, Network
from llog.state.cluster_format import finalize

log = logging.getLogger(__name__)


class FaultSwitch(Protocol):
    """What chaos needs of the S3 proxy: turn one kind of fault on, and off."""

    def inject(self, fault: str, rate: float) -> None: ...

    def clear(self) -> None: ...


def etcd_leader(members: Sequence[EtcdServer]) -> int:
    """Index of the member that is the etcd leader (asked through etcd's JSON gateway)."""
    for m in members:
        if m.proc.poll() is not None:
            continue
        try:
            req = urllib.request.Request(f"http://{m.endpoint}/v3/maintenance/status", data=b"{}")
            with urllib.request.urlopen(req, timeout=2) as r:
                doc = json.load(r)
        except OSError:
            continue
        leader = str(doc.get("leader", ""))
        if leader and leader == str(doc.get("header", {}).get("member_id", "")):
            return members.index(m)
    raise LlogError("no etcd member says it is the leader")


#: The steps that count as faults injected (the others end one).
_INJECTING = ("kill", "pause", "faults", "partition", *STOP_START_ACTIONS, "finalize")


class Chaos:
    """A thread running the scenario's chaos events; :attr:`events` records what
    happened (one entry per step, with ``ok`` and the time it was done).
    :meth:`stop` cancels whatever has not run yet, and resumes anything paused."""

    def __init__(
        self,
        events: Sequence[ChaosEvent],
        processes: Mapping[str, ManagedProcess],
        t0: float,
        *,
        stack: LocalStack | None = None,
        s3_faults: FaultSwitch | None = None,
        network: Network | None = None,
        zones: Mapping[str, str] | None = None,
        releases: Mapping[str, tuple[str, str | None]] | None = None,
    ) -> None:
        steps: list[tuple[float, int, str, ChaosEvent]] = []
        for i, e in enumerate(events):
            if e.action == "kill":
                steps.append((e.at_s, i, "kill", e))
                if e.restart_after_s >= 0:
                    steps.append((e.at_s + e.restart_after_s, i, "restart", e))
            elif e.action == "pause":
                steps += [(e.at_s, i, "pause", e), (e.at_s + e.duration_s, i, "resume", e)]
            elif e.action == "partition":
                steps += [(e.at_s, i, "partition", e), (e.at_s + e.duration_s, i, "heal", e)]
            elif e.action in (*STOP_START_ACTIONS, "finalize"):
                steps.append((e.at_s, i, e.action, e))
            else:
                steps += [(e.at_s, i, "faults", e), (e.at_s + e.duration_s, i, "faults-off", e)]
        self._steps = sorted(steps, key=lambda s: (s[0], s[1]))
        self._processes = processes
        self._stack = stack
        self._s3 = s3_faults
        self._network = network
        #: Node -> its zone, for the partition sides ``zone-<zone>``.
        self._zones = dict(zones or {})
        #: ``upgrade`` / ``rollback`` -> the (release, PYTHONPATH) a member starts on.
        self._releases = dict(releases or {})
        #: The two sides (node names) each partition event cut.
        self._cut: dict[int, tuple[list[str], list[str]]] = {}
        self._t0 = t0
        #: Which etcd members an event acted on, for its restart/resume step.
        self._etcd_targets: dict[int, list[int]] = {}
        self._paused: set[int] = set()
        #: The threads waiting for restarted members to answer (:meth:`_restart`).
        self._restarts: list[threading.Thread] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llog-loadtest-chaos", daemon=True)
        self.events: list[dict[str, Any]] = []

    def start(self) -> Chaos:
        self._thread.start()
        return self

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by type (``kill:broker``, ``pause:etcd``, ``faults:5xx``, …)."""
        out: Counter[str] = Counter()
        for e in self.events:
            if e["action"] in _INJECTING and e.get("ok"):
                kind = e.get("fault") if e["action"] == "faults" else e["target"].split("-")[0]
                out[f"{e['action']}:{kind}"] += 1
        return dict(out)

    def _run(self) -> None:
        for at, i, action, e in self._steps:
            if self._stop.wait(max(0.0, self._t0 + at - time.monotonic())):
                return
            entry: dict[str, Any] = {"planned_s": at, "action": action, "target": e.target}
            if action == "restart" and e.target in self._processes:
                self._restart(self._processes[e.target], entry)
                continue
            try:
                self._do(i, action, e, entry)
                entry["ok"] = True
            except (LlogError, OSError) as exc:
                entry.update(ok=False, error=str(exc))
            self._record(entry)

    def _record(self, entry: dict[str, Any]) -> None:
        entry["done_s"] = round(time.monotonic() - self._t0, 3)
        log.warning("chaos: %s %s at %.1fs (ok=%s)", entry["action"], entry["target"], entry["done_s"], entry["ok"])
        self.events.append(entry)

    def _restart(self, proc: ManagedProcess, entry: dict[str, Any]) -> None:
        """Start a killed member again; the step is done (recorded) once it answers,
        from a thread of its own, so the plan goes on meanwhile: a start that a starved
        machine makes take 26 s must not push the next steps past the load's end."""
        entry["pid"] = proc.pid
        try:
            proc.start()
        except OSError as exc:
            entry.update(ok=False, error=str(exc))
            self._record(entry)
            return
        entry["new_pid"] = proc.pid

        def answered() -> None:
            try:
                proc.wait_healthy()
                entry["ok"] = True
            except (LlogError, OSError) as exc:  # killed again before it answered, say
                entry.update(ok=False, error=str(exc))
            self._record(entry)

        waiter = threading.Thread(target=answered, name=f"llog-loadtest-restart-{proc.name}", daemon=True)
        waiter.start()
        self._restarts.append(waiter)

    def _do(self, i: int, action: str, e: ChaosEvent, entry: dict[str, Any]) -> None:
        if action in ("partition", "heal"):
            self._partition(i, action, e, entry)
            return
        if action in ("faults", "faults-off"):
            if self._s3 is None:
                raise LlogError("no S3 proxy in this cluster (cluster.store must be 's3')")
            entry.update(fault=e.fault, rate=e.rate)
            if action == "faults":
                self._s3.inject(e.fault, e.rate)
            else:
                self._s3.clear()
            return
        if action == "finalize":
            self._finalize(entry)
            return
        if e.target.startswith("etcd"):
            self._do_etcd(i, action, e, entry)
            return
        proc = self._processes[e.target]
        entry["pid"] = proc.pid
        if action == "clean-restart":
            entry.update(version_before=proc.version or None)
            entry.update(proc.restart(), new_pid=proc.pid)
            return
        if action in self._releases:
            release, pythonpath = self._releases[action]
            entry.update(release_before=proc.release or None, release_after=release or None,
                         version_before=proc.version or None)
            # What the process says it runs once it answers: the release, not the intent.
            entry.update(proc.replace(release, pythonpath), new_pid=proc.pid)
            return
        if action == "kill":
            proc.kill9()
        else:
            self._signal(i, proc.pid, action)

    def _finalize(self, entry: dict[str, Any]) -> None:
        """``llog upgrade finalize``, as an operator runs it once every member is replaced."""
        if self._stack is None:
            raise LlogError("no cluster to finalize")
        with Connection(self._stack.config) as conn:
            before, after = finalize(conn)
        entry.update(format_before=before.version, format_after=after.version)

    def _do_etcd(self, i: int, action: str, e: ChaosEvent, entry: dict[str, Any]) -> None:
        if self._stack is None:
            raise LlogError("chaos on etcd needs the cluster's stack")
        members = self._stack.etcds
        if action in ("kill", "pause"):
            if e.target == "etcd":
                chosen = list(range(len(members)))
            elif e.target == "etcd-leader":
                chosen = [etcd_leader(members)]
            else:
                chosen = [int(e.target.rsplit("-", 1)[1])]
            self._etcd_targets[i] = chosen
        chosen = self._etcd_targets.get(i, [])
        entry["members"] = [members[m].member for m in chosen]
        entry["pids"] = [members[m].proc.pid for m in chosen]
        if action == "kill":
            for m in chosen:
                members[m].kill9()
        elif action == "restart":
            for m in chosen:
                members[m] = members[m].restart()
            for m in chosen:
                members[m].wait_ready(60)
        else:
            for m in chosen:
                self._signal(i, members[m].proc.pid, action)

    def _partition(self, i: int, action: str, e: ChaosEvent, entry: dict[str, Any]) -> None:
        net = self._network
        if net is None:
            raise LlogError("partitions need the cluster's network (cluster.network = true)")
        if action == "partition":
            a = self._side(e.target)
            b = [n for n in self._side(e.peer) if n not in a]
            self._cut[i] = (a, b)
            net.cut(a, b)
            if not e.one_way:
                net.cut(b, a)
        a, b = self._cut.get(i, ([], []))
        if action == "heal":
            net.heal(a, b)
            net.heal(b, a)
        entry.update(peer=e.peer, one_way=e.one_way, side_a=a, side_b=b)

    def _side(self, name: str) -> list[str]:
        """The network nodes a partition side names."""
        assert self._stack is not None
        etcds = etcd_nodes(len(self._stack.etcds))
        if name == CLIENTS:
            return [CLIENTS]
        if name == "brokers":
            return [n for n in self._processes if n.startswith("broker-")]
        if name == "etcd":
            return etcds
        if name == "etcd-leader":
            return [etcds[etcd_leader(self._stack.etcds)]]
        if name.startswith("etcd-"):
            return [etcds[int(name.rsplit("-", 1)[1])]]
        if name == "s3":
            return [n for n in ("s3", "s3-proxy") if self._network is not None and n in self._network.nodes]
        if name == "rest":  # as a peer: whatever the target's side leaves out
            return list(self._network.nodes) if self._network is not None else []
        if name.startswith("zone-"):
            return sorted(n for n, z in self._zones.items() if z == name[len("zone-"):])
        return [name]

    def _signal(self, i: int, pid: int | None, action: str) -> None:
        if pid is None:
            raise LlogError("the process is not running")
        if action == "pause":
            os.kill(pid, signal.SIGSTOP)
            self._paused.add(pid)
        else:
            os.kill(pid, signal.SIGCONT)
            self._paused.discard(pid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for waiter in self._restarts:  # each bounded by wait_healthy's own timeout
            waiter.join()
        for pid in list(self._paused):  # never leave a process stopped behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._paused.clear()
        if self._s3 is not None:
            self._s3.clear()
        if self._network is not None:  # never leave a cut behind
            self._network.heal()


def skew_env(offset: str) -> dict[str, str]:
    """Environment that runs a process with its wall clock ``offset`` off (``"+600s"``,
    ``"-10m"``): Debian's libfaketime preloaded into the process itself (not the
    ``faketime`` wrapper, which forks, so that signals reach the member); its monotonic
    clock stays true. A Python process also loads ``faketime_shim/sitecustomize.py``,
    which keeps ``time.sleep`` working under the preload."""
    libs = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not libs:
        raise LlogError("clock skew needs libfaketime: install Debian's faketime package")
    shim = str(Path(__file__).with_name("faketime_shim"))
    path = os.pathsep.join(filter(None, (shim, os.environ.get("PYTHONPATH"))))
    return {"LD_PRELOAD": libs[0], "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": path}


__all__ = ["Chaos", "FaultSwitch", "etcd_leader", "skew_env"]
