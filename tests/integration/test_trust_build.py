"""Builds you can trust: a killed build's staging folder is swept, racing builds publish once.

Real `drivetrain data build` processes: one is SIGKILLed mid-build (its staging folder keeps
the owner lock of a dead process) and the next build removes that folder; several builds
started together into one pre-created empty `--output` leave exactly one published dataset,
and every other one exits non-zero with one `error:` line naming the output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from platform_lib.shards.manifest import MANIFEST_NAME, load_manifest
from platform_lib.sources.synthetic import write_synthetic_logs
from platform_lib.sources.synthetic_scene import SyntheticConfig

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")


@pytest.fixture(scope="module")
def raw_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic raw logs big enough that a build runs for about a second."""
    root = tmp_path_factory.mktemp("raw")
    write_synthetic_logs(SyntheticConfig(num_logs=2, frames_per_log=60, seed=3), root)
    return root


def _build(raw: Path, output: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "DRIVETRAIN_HOME": str(home)}
    command = [DRIVETRAIN, "data", "build", "--source", "synthetic", "--input", str(raw)]
    return subprocess.Popen(
        [*command, "--output", str(output), "--shard-size-mb", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _staging(output: Path) -> list[Path]:
    return sorted(output.parent.glob(f".{output.name}.staging-*"))


def test_next_build_sweeps_the_staging_folder_of_a_killed_build(
    raw_logs: Path, tmp_path: Path
) -> None:
    output = tmp_path / "ds"
    victim = _build(raw_logs, output, tmp_path)
    deadline = time.monotonic() + 120
    try:
        while not any(list(s.glob("shards/*")) for s in _staging(output)):
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline, "the build never started writing shards"
            time.sleep(0.002)
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.kill()
        victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    left = _staging(output)
    assert len(left) == 1, left
    assert not (output / MANIFEST_NAME).exists(), "the build finished before it was killed"

    second = _build(raw_logs, output, tmp_path)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert load_manifest(output).num_samples == 120
    assert _staging(output) == [], "the dead build's staging folder is still there"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".ds")) == []


def test_racing_builds_into_one_empty_folder_publish_once(raw_logs: Path, tmp_path: Path) -> None:
    output = tmp_path / "ds"
    output.mkdir()  # a pre-created empty folder is a fine output
    builds = [_build(raw_logs, output, tmp_path) for _ in range(3)]
    results = [(b.wait(timeout=300), *b.communicate(timeout=60)) for b in builds]
    winners = [r for r in results if r[0] == 0]
    assert len(winners) == 1, results
    assert load_manifest(output).num_samples == 120
    for code, _out, err in (r for r in results if r[0] != 0):
        assert code == 1 and "Traceback" not in err, err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(output) in errors[0], err
    assert _staging(output) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
