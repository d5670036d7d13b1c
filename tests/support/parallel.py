"""Run independent, slow test set-ups at once: subprocesses whose start-up is mostly imports
and waits (pyflyte runs and packagings, elastic launches) overlap on two cores.

Each call keeps its own deadline (the subprocess timeout it passes); the results do not depend
on the order in which the calls finish.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_concurrently(calls: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Call the functions of `calls`, as many at once as there are CPUs; return their results
    by name. An exception of any call is raised here.

    At most one call per CPU: more would only slow each subprocess down towards its deadline.
    """
    with ThreadPoolExecutor(max_workers=min(len(calls), os.cpu_count() or 1)) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}
