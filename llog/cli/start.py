"""Where ``llog consume --from`` starts in each partition.

``earliest``/``beginning``, ``latest``/``end``, an absolute offset ``N``, ``-N`` (N
records before the end), ``+N`` (N records after the log start), or a time: ISO-8601
(``2026-11-24T09:00:00Z``; without a zone it is UTC) or ``@<epoch ms>``. Parsed
while the command line is parsed; resolved per partition once connected.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from llog.reader import Reader
from llog.topic.time_lookup import offset_for_timestamp

Kind = Literal["earliest", "latest", "offset", "from_end", "from_start", "timestamp"]

_ALIASES: dict[str, Kind] = {"earliest": "earliest", "beginning": "earliest", "latest": "latest", "end": "latest"}
_SIGNED = re.compile(r"([+-]?)([0-9]+)")
_SIGN_KINDS: dict[str, Kind] = {"": "offset", "-": "from_end", "+": "from_start"}


@dataclass(frozen=True)
class StartPosition:
    """A parsed ``--from`` value; ``value`` is the offset, count or epoch ms its kind needs."""

    kind: Kind
    value: int = 0

    def resolve(self, reader: Reader, topic: str, partition: int) -> int:
        """The first offset to read in ``topic``/``partition``."""
        low, high = reader.high_watermark(topic, partition)
        if self.kind == "earliest":
            return low
        if self.kind == "latest":
            return high
        if self.kind == "offset":
            return self.value
        if self.kind == "from_end":
            return max(low, high - self.value)
        if self.kind == "from_start":
            return min(high, low + self.value)
        found = offset_for_timestamp(reader, topic, partition, self.value)
        return high if found is None else found


def parse_start(text: str) -> StartPosition:
    """The ``--from`` argument type (raises :class:`argparse.ArgumentTypeError`)."""
    word = text.strip().lower()
    if word in _ALIASES:
        return StartPosition(_ALIASES[word])
    m = _SIGNED.fullmatch(word)
    if m is not None:
        sign, num = m.group(1), int(m.group(2))
        return StartPosition(_SIGN_KINDS[sign], num)
    if word.startswith("@"):
        if word[1:].isdigit():
            return StartPosition("timestamp", int(word[1:]))
    else:
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            pass
        else:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return StartPosition("timestamp", int(when.timestamp() * 1000))
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a start position: use earliest, latest, an offset, -N, +N, "
        "an ISO-8601 time or @EPOCH_MS"
    )
