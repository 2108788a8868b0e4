"""The broker's garbage-collector settings (llog/gc_tuning.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from llog.gc_tuning import MIDDLE, OLD, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    gc.unfreeze()  # whatever froze before (an in-process broker) is not this test's
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_tune_sets_the_thresholds_and_freezes_start_up(restore_gc: None) -> None:
    tune_gc(20_000)
    assert gc.get_threshold() == (20_000, MIDDLE, OLD)
    assert gc.get_freeze_count() > 0


def test_zero_leaves_the_collector_alone(restore_gc: None) -> None:
    before = gc.get_threshold()
    tune_gc(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
