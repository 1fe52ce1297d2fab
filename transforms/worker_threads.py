"""Per-element work of a DoFn overlapped on a few threads, in order, with a bounded backlog.

Pillow and file reads release the GIL, so a DoFn whose elements are images gets close to one core
per thread. Results come back in the order the elements were given, at most ``window`` in flight;
metrics and outputs stay on the bundle's thread (Beam's metrics count only there).
"""

from __future__ import annotations

import collections
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Deque, Iterable, Iterator, TypeVar

__all__ = ["usable_cores", "thread_count", "window_for", "new_pool", "OrderedWork", "ordered_map"]

_T = TypeVar("_T")
_R = TypeVar("_R")
# Elements in flight per thread: one running, one waiting to be taken back.
_IN_FLIGHT_PER_THREAD = 2
# Results of work done inline (no pool) held and given back together, so that a step's code runs a
# few times in a row before the next step's (BENCHMARKS.md, "Where a build's marginal CPU goes"); and
# the most bytes they may hold (``OrderedWork(weigh=...)``): a larger result is given back at once.
INLINE_BATCH = 16
INLINE_HELD_BYTES = 16 << 20


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, e.g. under ``taskset``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform (macOS)
        return max(1, os.cpu_count() or 1)


def thread_count(requested: int) -> int:
    """Threads for ``requested`` (a ``--image_threads`` value): 0 means one per usable core.

    Raises:
        ValueError: ``requested`` is negative.
    """
    if requested < 0:
        raise ValueError(f"thread count must be >= 0 (0: one per usable core), got {requested}")
    return requested or usable_cores()


def window_for(threads: int) -> int:
    """How many elements may be submitted and not yet taken back, for ``threads`` threads (one:
    work done inline, ``INLINE_BATCH`` results held)."""
    return _IN_FLIGHT_PER_THREAD * threads if threads > 1 else INLINE_BATCH


def new_pool(threads: int, name: str) -> ThreadPoolExecutor | None:
    """A pool of ``threads`` threads named after the step, or None for one thread (work runs inline)."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name) if threads > 1 else None


class OrderedWork:
    """Runs ``fn(*args)`` on a pool (None: inline) and gives the results back in submission order.

    At most ``window`` (>= 1) calls are submitted and not yet taken back. A call's exception is raised
    where its result is taken back; ``close`` waits for the calls after it, so nothing outlives the bundle.
    Inline, a call runs when it is submitted; with ``weigh`` (a result's bytes held) its result is held
    until ``window`` results or ``held_bytes`` bytes are, then all are given back together.
    """

    def __init__(self, pool: ThreadPoolExecutor | None, window: int,
                 weigh: Callable[[Any], int] | None = None, held_bytes: int = INLINE_HELD_BYTES) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._pool = pool
        self._window = window
        self._pending: Deque[Future] = collections.deque()
        self._weigh = weigh if pool is None else None
        self._held: list = []  # inline results not yet given back
        self._held_weight = 0  # their bytes
        self._most_held = held_bytes

    def submit(self, fn: Callable[..., _R], *args: Any) -> Iterator[_R]:
        """Starts ``fn(*args)``; yields the results that had to be taken back to stay in the window.

        The returned iterator must be consumed before the next ``submit``.
        """
        if self._pool is None:
            result = fn(*args)
            if self._weigh is None:
                return iter((result,))
            self._held.append(result)
            self._held_weight += self._weigh(result)
            full = len(self._held) >= self._window or self._held_weight >= self._most_held
            return self._give_back() if full else iter(())
        self._pending.append(self._pool.submit(fn, *args))
        return self._take(len(self._pending) - self._window)

    def drain(self) -> Iterator[_R]:
        """Yields every result not yet taken back, waiting for each in order."""
        return self._give_back() if self._pool is None else self._take(len(self._pending))

    def _give_back(self) -> Iterator[_R]:
        held, self._held, self._held_weight = self._held, [], 0
        return iter(held)

    def _take(self, count: int) -> Iterator[_R]:
        for _ in range(count):
            yield self._pending.popleft().result()

    def close(self) -> None:
        """Cancels calls not yet started and waits for running ones; their results are dropped."""
        self._give_back()
        pending, self._pending = self._pending, collections.deque()
        for future in pending:
            future.cancel()
        for future in pending:
            if not future.cancelled():
                future.exception()  # waits; an error of a dropped call is not raised

    def __len__(self) -> int:
        return len(self._pending) + len(self._held)


def ordered_map(fn: Callable[[_T], _R], items: Iterable[_T], pool: ThreadPoolExecutor | None,
                window: int) -> Iterator[_R]:
    """``map(fn, items)`` on ``pool``, in order, with at most ``window`` items in flight.

    If the consumer stops early, the calls in flight are cancelled or waited for before the generator closes.
    """
    if pool is None:
        yield from map(fn, items)
        return
    work = OrderedWork(pool, window)
    try:
        for item in items:
            yield from work.submit(fn, item)
        yield from work.drain()
    finally:
        work.close()
