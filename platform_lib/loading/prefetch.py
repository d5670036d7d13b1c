"""Receive batches in a background thread of the main process.

Taking a batch off the DataLoader costs the main process a few ms (unpickling, mapping the
shared-memory blocks, rebuilding ndarray views). Done in a thread, that work overlaps the
accelerator step (which releases the GIL while it waits on the device), so the training
loop's `next()` only pops a ready batch from a queue.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["iterate_in_background"]

_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def iterate_in_background(make: Callable[[], Iterable[Any]], *, depth: int) -> Iterator[Any]:
    """Yield the items of `make()`, produced by a daemon thread up to `depth` items ahead.

    `make` runs in the thread: start DataLoader workers before, on the caller's thread (a
    fork from this thread deletes the caller's thread state in the child). An exception in the
    thread is re-raised here; closing this generator stops the thread and drops the iterable.
    """
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in make():
                if not offer(item):
                    return
            offer(_DONE)
        except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
            offer(_Failure(exc))

    thread = threading.Thread(target=produce, name="drivetrain-loader-receive", daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=60)
