"""Run independent, slow test set-ups at once: subprocesses whose start-up is mostly imports
and waits (pyflyte runs and packagings, elastic launches) overlap on two cores.

Each call keeps its own deadline (the subprocess timeout it passes); the results do not depend
on the order in which the calls finish.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_concurrently(calls: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Call every function of `calls` in its own thread; return their results by name.

    For independent subprocesses (each with its own deadline) whose start-up is mostly
    imports: two cores run two at once. An exception of any call is raised here.
    """
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}
