"""A loader script whose dataset is refused exits with its own code, never an abort (134).

`build_loader` on a dataset whose `shards/` folder, or one shard, links out of the dataset
folder raises PathOutsideRootError while opening the view, right after the index was parsed.
Arrow parses the index on its own threads; a source over Python bytes was released on one of
them after the call returned, which at interpreter exit ended that C++ thread inside a
destructor ("terminate called without an active exception", exit 134, in about half the
runs). Each variant runs the script 10 times in fresh interpreters.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
RUNS = 10

SCRIPT = textwrap.dedent(
    """
    import sys
    from platform_lib.loading.loader import build_loader

    loader = build_loader(sys.argv[1], rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)
    for batch in loader:
        pass
    """
)


def _link_out(dataset: Path, name: str, outside: Path) -> None:
    shutil.move(dataset / name, outside)
    (dataset / name).symlink_to(outside)


@pytest.mark.parametrize("linked", ["shards", "shards/shard-000001.tar"])
def test_a_refused_dataset_ends_the_script_with_its_own_exit_code(tmp_path, linked):
    dataset = write_test_dataset(tmp_path / "data", {"loga": 6, "logb": 6, "logc": 6})
    _link_out(dataset, linked, tmp_path / "outside")
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "DRIVETRAIN_CACHE": str(tmp_path / "cache")}
    codes = []
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, str(script), str(dataset)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        codes.append(done.returncode)
        assert "terminate called" not in done.stderr, done.stderr[-2000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("platform_lib.fsguard.PathOutsideRootError: path leaves its root")
    assert codes == [1] * RUNS  # the uncaught exception's code, never 134 (SIGABRT)
