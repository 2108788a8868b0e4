"""What the S3 proxy breaks: fault rules, each with a kind, a probability and an
optional filter on the request's operation, gathered in a JSON-able plan."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from llog.errors import ConfigError

#: 500 InternalError with S3's XML error body (botocore retries it).
ERROR_500 = "error_500"
#: 503 SlowDown with S3's XML error body (botocore retries it as throttling).
ERROR_503 = "error_503"
#: The request is read and never answered: the client's read timeout fires.
TIMEOUT = "timeout"
#: The response is held ``delay_ms`` before it is sent.
SLOW = "slow"
#: The connection is closed mid-body: halfway through a request body, or after the
#: response headers and half the response body (closed with no answer when the
#: response has no body; the upstream has then applied the request).
DROP = "drop"
KINDS = (ERROR_500, ERROR_503, TIMEOUT, SLOW, DROP)

#: Operation classes a rule can be limited to (``LIST``: a GET on a bucket;
#: ``DELETE`` includes DeleteObjects, a POST ``?delete``).
OPS = ("GET", "PUT", "DELETE", "LIST", "HEAD", "POST")


@dataclass(frozen=True)
class FaultRule:
    """Inject ``kind`` into a matching request with ``probability`` (0..1)."""

    kind: str
    probability: float
    #: Operation classes this rule applies to; empty: every request.
    ops: tuple[str, ...] = ()
    #: ``slow``: how long the response is held, in milliseconds.
    delay_ms: float = 2000.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"fault kind {self.kind!r}: one of {KINDS}")
        if not 0.0 <= self.probability <= 1.0:
            raise ConfigError(f"fault {self.kind}: probability {self.probability} is not in [0, 1]")
        bad = [op for op in self.ops if op not in OPS]
        if bad:
            raise ConfigError(f"fault {self.kind}: unknown operations {bad}: one of {OPS}")
        if self.delay_ms < 0:
            raise ConfigError(f"fault {self.kind}: delay_ms must be >= 0")

    def matches(self, op: str) -> bool:
        return not self.ops or op in self.ops


@dataclass(frozen=True)
class FaultPlan:
    """Rules tried in order; the first whose filter matches and whose draw falls under
    its probability is the request's fault. No rules: a clean pass-through."""

    rules: tuple[FaultRule, ...] = field(default_factory=tuple)

    def choose(self, op: str, rng: random.Random) -> FaultRule | None:
        for rule in self.rules:
            if rule.matches(op) and rng.random() < rule.probability:
                return rule
        return None

    def to_json(self) -> dict[str, Any]:
        return {"rules": [asdict(r) for r in self.rules]}

    @classmethod
    def from_json(cls, doc: Any) -> FaultPlan:
        """``{"rules": [{"kind": "error_503", "probability": 0.1, "ops": ["PUT"]}, ...]}``."""
        if not isinstance(doc, dict) or not isinstance(doc.get("rules", []), list):
            raise ConfigError(f"fault plan must be an object with a 'rules' list, got {doc!r}")
        try:
            rules = tuple(
                FaultRule(**{**r, "ops": tuple(op.upper() for op in r.get("ops", ()))}) for r in doc.get("rules", [])
            )
        except (TypeError, AttributeError) as exc:
            raise ConfigError(f"bad fault rule in {doc!r}: {exc}") from None
        return cls(rules)
