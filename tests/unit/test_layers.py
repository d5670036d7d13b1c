"""The library stands on its own: every platform_lib module imports with flytekit absent.

The layering itself (who may import whom) is checked by `lint-imports` (`make lint`,
contracts in pyproject.toml); these tests check the run-time half (no module needs flytekit)
and the one rule for packages (an `__init__.py` is a docstring only).
"""

from __future__ import annotations

import subprocess
import sys

_IMPORT_ALL = """
import importlib, importlib.abc, pkgutil, sys

class NoFlyte(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("flytekit", "flytekitplugins", "tasks", "workflows"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, NoFlyte())
before = set(sys.modules)  # a namespace-package .pth may have created "flytekitplugins" at startup
import platform_lib, schemas
names = sorted(
    m.name for pkg in (platform_lib, schemas)
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
)
for name in names:
    importlib.import_module(name)
leaked = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("flytekit", "flytekitplugins"))
print(len(names), leaked)
"""


def test_every_library_module_imports_without_flytekit():
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    count, leaked = result.stdout.split(" ", 1)
    assert int(count) > 60 and leaked.strip() == "[]"


def test_the_blocker_really_blocks():
    code = _IMPORT_ALL.split("import platform_lib")[0] + "import flytekit\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "blocked by the test" in result.stderr


def test_every_package_init_is_a_docstring_only():
    """One rule for packages: an `__init__.py` holds its docstring and nothing else (no
    re-exports, no code); callers import from the module that defines a name, so importing a
    light module (the CLI's commands, `training.config`) never pulls in a heavy sibling."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[2] / "platform_lib"
    inits = sorted(root.rglob("__init__.py"))
    assert len(inits) >= 10
    for path in inits:
        body = ast.parse(path.read_text()).body
        assert body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        assert len(body) == 1, f"{path.relative_to(root.parent)}: more than a docstring"
