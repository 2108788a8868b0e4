"""What object-store requests cost: the operations S3 bills as class A (PUT, COPY, POST,
LIST) and class B (GET, HEAD), as ``llog_s3_ops_total{op}`` names them, priced with
``LlogConfig.s3_price_put_per_1000`` and ``s3_price_get_per_1000``."""

from __future__ import annotations

from collections.abc import Mapping

from llog.config import LlogConfig

CLASS_A = ("put", "list")
CLASS_B = ("get", "get_range", "head")


def request_classes(ops: Mapping[str, float]) -> tuple[float, float]:
    """Class A and class B requests among ``ops`` (requests by operation)."""
    return sum(ops.get(op, 0.0) for op in CLASS_A), sum(ops.get(op, 0.0) for op in CLASS_B)


def request_usd(config: LlogConfig, class_a: float, class_b: float) -> tuple[float, float]:
    """What ``class_a`` and ``class_b`` requests cost, in USD, each."""
    return class_a / 1000 * config.s3_price_put_per_1000, class_b / 1000 * config.s3_price_get_per_1000
