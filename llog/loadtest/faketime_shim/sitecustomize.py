"""Loaded (as ``sitecustomize``) by the Python processes a load test runs with a skewed
clock: libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC`` makes every
``time.sleep`` fail with ``EINVAL`` (it shifts the absolute monotonic deadline of
``clock_nanosleep`` by the wall-clock offset), which real clock skew never does — a
broker's S3 retries, whose back-off sleeps, failed with ``[Errno 22]``. ``select``
takes a relative timeout the preload leaves alone."""

import select
import time
from typing import SupportsIndex


def _sleep(seconds: float | SupportsIndex) -> None:
    select.select([], [], [], float(seconds))


time.sleep = _sleep
