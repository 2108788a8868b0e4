"""The deployment files, checked without a Docker engine: docker-compose.yml against the
Compose Specification schema and for wiring (health checks, dependencies), Prometheus
targets against the compose services, and the Grafana dashboard's queries against the
metrics llog really exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from compactor.metrics import compactor_metrics, register_cost_estimate
from llog.cli import build_parser
from llog.config import LlogConfig
from llog.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
SCHEMA = Path(__file__).resolve().parent / "data" / "compose_spec.json"
#: Suffixes Prometheus exposition adds to a family's name, by metric type.
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "unknown": ("",),
}


def _yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _yaml(ROOT / "docker-compose.yml")


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    svc = compose["services"]
    assert isinstance(svc, dict)
    return svc


def _llog_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if str(s.get("image", "")).startswith("llog:")}


def _one_shot(service: dict[str, Any]) -> bool:
    return service.get("restart") == "no"


def test_compose_file_matches_compose_spec(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft201909Validator(schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_schema_rejects_a_broken_compose_file(compose: dict[str, Any]) -> None:
    """The vendored schema really constrains services (guards against an empty schema)."""
    schema = json.loads(SCHEMA.read_text())
    broken = {**compose, "services": {**compose["services"], "etcd": {**compose["services"]["etcd"], "helthcheck": {}}}}
    assert list(jsonschema.Draft201909Validator(schema).iter_errors(broken))


def test_stack_has_every_component(services: dict[str, dict[str, Any]]) -> None:
    commands = sorted(s["command"][0] for s in _llog_services(services).values())
    assert commands == ["broker", "broker", "compactor"]
    images = " ".join(str(s.get("image", "")) for s in services.values())
    for image in ("quay.io/coreos/etcd:v3.5", "minio/minio", "minio/mc", "prom/prometheus", "grafana/grafana"):
        assert image in images


def test_llog_service_commands_exist_in_the_cli(services: dict[str, dict[str, Any]]) -> None:
    parser = build_parser()
    for name, svc in _llog_services(services).items():
        # argparse exits (SystemExit 2) on an unknown subcommand or a bad flag.
        args = parser.parse_args(svc["command"])
        assert args.command == svc["command"][0], name


def test_every_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert isinstance(check, dict) and check.get("test") and not check.get("disable"), name


def test_dependencies_exist_and_wait_for_health(services: dict[str, dict[str, Any]]) -> None:
    seen = 0
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions"
        for target, spec in deps.items():
            assert target in services, f"{name} depends on unknown service {target}"
            want = "service_completed_successfully" if _one_shot(services[target]) else "service_healthy"
            assert spec["condition"] == want, f"{name} -> {target}"
            seen += 1
    assert seen >= 8


def test_llog_services_listen_where_their_healthcheck_and_ports_look(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in _llog_services(services).items():
        env = svc["environment"]
        role = svc["command"][0].upper()
        port = env[f"LLOG_{role}_PORT"]
        assert env[f"LLOG_{role}_HOST"] == "0.0.0.0", name
        # A broker is healthy once ready (etcd and the store answer); the compactor has /health only.
        probe = "/ready" if role == "BROKER" else "/health"
        assert f"127.0.0.1:{port}{probe}" in " ".join(svc["healthcheck"]["test"]), name
        assert any(str(p).endswith(f":{port}") for p in svc["ports"]), name
        # Every LLOG_ variable is a real setting (a typo would be silently ignored).
        LlogConfig.from_env({k: str(v) for k, v in env.items()})
        fields = {f"LLOG_{f.upper()}" for f in LlogConfig.__dataclass_fields__}
        assert {k for k in env if k.startswith("LLOG_")} <= fields, name


def test_prometheus_scrapes_compose_services(services: dict[str, dict[str, Any]]) -> None:
    prom = _yaml(DEPLOY / "prometheus" / "prometheus.yml")
    scraped: dict[str, str] = {}
    for job in prom["scrape_configs"]:
        for sc in job["static_configs"]:
            for target in sc["targets"]:
                host, _, port = target.partition(":")
                assert host in services, f"{job['job_name']}: {target} is not a compose service"
                assert port.isdigit(), target
                scraped[host] = job.get("metrics_path", "/metrics")
    for name in _llog_services(services):
        assert scraped.get(name) == "/metrics/prometheus", name
    assert "etcd" in scraped


def test_grafana_provisioning_points_at_the_stack(services: dict[str, dict[str, Any]]) -> None:
    prov = DEPLOY / "grafana" / "provisioning"
    [ds] = _yaml(prov / "datasources" / "prometheus.yml")["datasources"]
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in services
    [provider] = _yaml(prov / "dashboards" / "llog.yml")["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"] if v.startswith("./")}
    assert (ROOT / mounts[provider["options"]["path"]] / "llog.json").is_file()
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "llog.json").read_text())
    uids = {p["datasource"]["uid"] for p in dash["panels"] if p["type"] != "row"}
    assert uids == {ds["uid"]}


def _exported_names() -> set[str]:
    """Every sample name a broker or compactor registry exposes (families with no
    children yet included, by type)."""
    base = Metrics()
    compactor_metrics(base)
    register_cost_estimate(base, LlogConfig())
    names: set[str] = set()
    for family in base.registry.collect():
        names.update(family.name + s for s in _SUFFIXES[family.type])
    return names


def test_dashboard_queries_name_exported_metrics() -> None:
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "llog.json").read_text())
    exported = _exported_names()
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    titles = [p["title"] for p in panels]
    for topic in ("Produce rate", "Consume rate", "latency", "Batcher queue", "Compaction lag", "S3 requests", "cost"):
        assert any(topic in t for t in titles), topic
    unknown: dict[str, set[str]] = {}
    for p in panels:
        used = {m for t in p["targets"] for m in re.findall(r"\bllog_[a-z0-9_]+", t["expr"])}
        assert used, f"panel {p['title']!r} queries no llog_ metric"
        missing = used - exported
        if missing:
            unknown[p["title"]] = missing
    assert not unknown, f"dashboard queries metrics llog does not export: {unknown}"
