"""Loads deploy/check.py (a script beside the manifests, not an installed module) for tests."""

from __future__ import annotations

import copy
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

CHECK_PY = Path(__file__).resolve().parents[2] / "deploy" / "check.py"


def load_check() -> ModuleType:
    """Import deploy/check.py as module `deploy_check`; skip when the CRD files are absent."""
    if "deploy_check" not in sys.modules:
        spec = importlib.util.spec_from_file_location("deploy_check", CHECK_PY)
        module = importlib.util.module_from_spec(spec)
        sys.modules["deploy_check"] = module
        spec.loader.exec_module(module)
    check = sys.modules["deploy_check"]
    if not check.SCHEMAS.is_dir():
        pytest.skip(
            f"CRD schemas not found at {check.SCHEMAS} (the shared/ folder beside the repo)",
            allow_module_level=True,
        )
    return check


def mutate(docs: list, kind: str, name: str, change: Callable[[dict], None]) -> list:
    """Copy of `docs` with `change` applied to (a deep copy of) the object kind/name."""
    check = sys.modules["deploy_check"]
    hits = [d for d in docs if d.kind == kind and d.name == name]
    assert hits, f"no {kind}/{name} in deploy/"
    out = []
    for doc in docs:
        if doc in hits:
            obj = copy.deepcopy(doc.obj)
            change(obj)
            doc = check.Document(doc.where, obj)
        out.append(doc)
    return out
