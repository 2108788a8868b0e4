"""Fault injection for the nemesis suite and realistic benchmarks.

- :mod:`llog.nemesis.latency`: named S3 latency profiles (lognormal first-byte delays).
- :mod:`llog.nemesis.faults`: which faults to inject, with what probability, on which
  requests (a JSON-able plan).
- :mod:`llog.nemesis.s3_proxy`: an asyncio HTTP proxy in front of an S3-compatible server
  that applies a plan and a profile per request, with a control API.
- :mod:`llog.nemesis.control`: the control API's client, for another process.
"""
