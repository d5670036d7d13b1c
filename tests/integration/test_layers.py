"""The library stands on its own: every platform_lib module imports with flytekit absent.

The layering itself (who may import whom) is checked by `lint-imports` (`make lint`,
contracts in pyproject.toml); this test checks the run-time half: no module needs flytekit.
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


def test_lazy_packages_import_their_exports_explicitly_for_type_checkers():
    """shards/, loading/, training/ and telemetry/ load submodules on first use (a fast
    `drivetrain --help`, a registration pod without torch); their
    `if TYPE_CHECKING:` block must name the same exports, so mypy sees the real types."""
    import ast
    import importlib
    import inspect

    for name in (
        "platform_lib.shards",
        "platform_lib.loading",
        "platform_lib.training",
        "platform_lib.telemetry",
        "platform_lib.models",
        "platform_lib.models.bev_fusion",
    ):
        package = importlib.import_module(name)
        tree = ast.parse(inspect.getsource(package))
        block = next(
            n
            for n in tree.body
            if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
        )
        typed = {
            a.name: node.module
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for a in node.names
        }
        assert typed == package._EXPORTS, name
        assert sorted(typed) == sorted(package.__all__), name
