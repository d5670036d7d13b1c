"""Lazy package exports (PEP 562), so `drivetrain --help` does not import torch or pyarrow."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return (`__getattr__`, `__dir__`) for a package whose names live in submodules.

    Args:
        namespace: the package's `globals()`; a resolved name is cached there.
        exports: public name -> absolute module path that defines it.
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
