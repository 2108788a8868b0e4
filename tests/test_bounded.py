"""The writer's bounded caches and partition locks (llog/bounded.py)."""

from __future__ import annotations

import threading

from llog.bounded import BoundedCache, PartitionLocks


def test_cache_forgets_the_least_recently_written() -> None:
    c: BoundedCache[str, int] = BoundedCache(2)
    c["a"], c["b"] = 1, 2
    c["a"] = 3  # rewritten: now the newest
    c["c"] = 4
    assert dict(c) == {"a": 3, "c": 4}
    assert c.pop("a") == 3 and c.pop("a", None) is None


def test_locks_are_bounded_but_never_dropped_while_held() -> None:
    locks = PartitionLocks(2)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with locks.hold([("t", 0)]):
            holding.set()
            assert release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(30)
    for p in range(1, 10):  # many other partitions come and go meanwhile
        with locks.hold([("t", p)]):
            pass
    assert len(locks) <= 2
    assert locks._entries[("t", 0)].lock.locked()  # the held lock survived the trimming
    release.set()
    t.join()
    with locks.hold([("t", 99)]):
        pass
    assert len(locks) <= 2
