"""The packages as layers: the one definition docs/architecture.md's layer table is
generated from and tests/test_layers.py holds the code to.

Every module of ``llog/`` and ``compactor/`` is in exactly one layer; a module imports
only from its own layer and the layers above it in the table (lower numbers), imports
under ``TYPE_CHECKING`` and inside functions included; and no module imports itself
back through others. ``python -m tests.layers`` prints the table;
``python -m tests.layers --write`` puts it into docs/architecture.md.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- layers: begin (python -m tests.layers --write) -->", "<!-- layers: end -->"


@dataclass(frozen=True)
class Layer:
    name: str
    #: Module paths relative to the repository root, ``fnmatch`` patterns; one that
    #: starts with ``!`` takes what it matches out of the layer.
    modules: tuple[str, ...]

    def holds_path(self, rel: str) -> bool:
        inside = any(fnmatch.fnmatch(rel, p) for p in self.modules if not p.startswith("!"))
        return inside and not any(fnmatch.fnmatch(rel, p[1:]) for p in self.modules if p.startswith("!"))
    holds: str


LAYERS: tuple[Layer, ...] = (
    Layer("0. basics", (
        "llog/errors.py", "llog/version.py", "llog/name_rules.py", "llog/names.py", "llog/records.py",
        "llog/config.py", "llog/environment.py", "llog/metrics.py", "llog/bounded.py", "llog/partitioner.py",
        "llog/gc_tuning.py", "llog/tls.py",
    ), "the error hierarchy (each error says whether it is `retriable`), the naming rule and `TopicPartition`, "
       "record types, `LlogConfig` (and the warnings of `LLOG_*` names it does not know), "
       "prometheus metrics, bounded caches, Kafka's key partitioner, the broker's "
       "garbage-collector settings, the HTTP API's TLS (server files, the client side between brokers)"),
    Layer("1. codec", ("llog/codec/*",),
          "bytes only: `bytes-batch-v1` bodies (§7), Kafka batches (§7.5: their records parsed, checked and "
          "inflated with a cap), Parquet bodies (§7.6), the `LLS1` shared blob (§6), the msgpack etcd values (§4), "
          "CRC-32"),
    Layer("2. store and etcd", (
        "llog/store/*", "llog/etcd/*", "llog/state/*", "llog/connection.py", "llog/topic/__init__.py",
        "llog/topic/guard.py", "llog/group_names.py",
    ), "the object-store interface (S3, local dir), hedged PUTs, the WAL blob cache and peer reads (§9 step 9), "
       "the etcd operations the protocol needs and etcd maintenance "
       "(compact, defragment, alarms), the key layout (§3), one `Connection` holding both; what writers, "
       "readers and compactors share: sessions (§3), control reads, materialization and settle (W4), the topic "
       "guard (§4.5), the names of the consumer groups"),
    Layer("3. write and read", (
        "llog/write/*", "llog/writer.py", "llog/scan/*", "llog/reader.py", "llog/topic/*", "!llog/topic/__init__.py",
        "!llog/topic/guard.py",
    ), "the write path `llog/write/` (§8: W0 checks and the uncompacted-keys gate, W1 staging, W2 commits, "
       "unknown outcomes, W3 acknowledgement) behind the `Writer` façade; the read path `llog/scan/` (§9) "
       "behind the `Reader` façade; topics (`llog/topic/`): admin and fencing, deletion, time lookups"),
    Layer("4. clients and tables", ("llog/producer/*", "llog/groups/*", "llog/table/*", "llog/auth/*",
                                    "llog/quotas/*", "llog/registry/*", "llog/txn/*"),
          "the batching producer (accumulator → sender), committed offsets, membership, the `Consumer`; "
          "transactions (§15: the record, staging, the one-etcd-transaction commit, expiry); "
          "table topics' Iceberg catalog and sync (§10.1); users and their SCRAM credentials, ACLs and the authorizer, "
          "failed logins' budgets, client quotas; "
          "the schema registry (§14)"),
    Layer("5. services", (
        "llog/broker/*", "llog/kafka/*", "llog/spark/*", "llog/__init__.py",
    ), "the HTTP broker and its Kafka listener, the Spark source and sink, the package's public names"),
    Layer("6. compactor", ("compactor/*", "!compactor/command.py", "!compactor/__main__.py"),
          "compaction (§10), retention and vacuum (§11), etcd history compaction, producer-state expiry, the "
          "long-running service"),
    Layer("7. dev and test tooling", ("llog/devstack.py", "llog/local_ports.py",
                                       "llog/moto_s3.py", "llog/loadtest/*", "llog/nemesis/*"),
          "local etcd and S3 servers, the load test and the nemesis (fault injection), on top of everything "
          "they start and check"),
    Layer("8. command line", ("llog/cli/*", "llog/__main__.py", "llog/demo.py", "compactor/command.py",
                              "compactor/__main__.py"),
          "the `llog` command, its subcommands (the compactor's in `compactor/command.py`, also "
          "`python -m compactor`) and the demo"),
)


def modules() -> dict[str, Path]:
    """Every module of llog/ and compactor/ by dotted name (a package by its own name)."""
    out = {}
    for pkg in ("llog", "compactor"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in it. ``from
    pkg import sub`` imports the submodule ``sub``, not ``pkg``'s own code."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(base)
    out = set()
    for target in found:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(g)))
    try:
        for v in sorted(g):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def layer_of(path: Path) -> list[int]:
    """The layers (their positions in :data:`LAYERS`) whose patterns match ``path``."""
    rel = path.relative_to(ROOT).as_posix()
    return [i for i, layer in enumerate(LAYERS) if layer.holds_path(rel)]


def table() -> str:
    rows = ["| layer | packages and modules | holds |", "|---|---|---|"]
    for layer in LAYERS:
        mods = ", ".join(f"`{p.replace('/*', '/')}`" if not p.startswith("!") else f"(not `{p[1:]}`)"
                         for p in layer.modules)
        rows.append(f"| {layer.name} | {mods} | {layer.holds} |")
    return "\n".join(rows)


def documented() -> str:
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


def main() -> None:
    if "--write" in sys.argv:
        text = DOC.read_text()
        DOC.write_text(text[: text.index(BEGIN) + len(BEGIN)] + "\n" + table() + "\n" + text[text.index(END):])
    else:
        print(table())


if __name__ == "__main__":
    main()
