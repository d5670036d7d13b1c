"""A file the user names that this user may not read is one line, never a traceback.

Tests run as root, and root ignores mode bits; each command here runs in a process that keeps
uid 0 but loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (`setpriv`), so the kernel applies
the mode bits to it like to any user: the one file under test is mode 000, everything else
stays readable. (Dropping to uid 65534 instead would lock it out of the interpreter, which
lives under /root.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from platform_lib.shards.manifest import load_manifest

REPO = Path(__file__).resolve().parents[2]
_NO_DAC = "-dac_override,-dac_read_search"
#: The one-line error of a file this user may not open, naming it (or a file inside the
#: folder under test: a folder without search permission fails at its first file).
DENIED = r"^error: .*[Pp]ermission denied.* \({path}(/[^)]*)?\): "


def _run_without_dac(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Run `python <args>` as root without the capabilities that let root ignore mode bits."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    env = os.environ | {"PYTHONPATH": str(REPO), "DRIVETRAIN_HOME": str(home)}
    return subprocess.run(
        [setpriv, f"--inh-caps={_NO_DAC}", f"--bounding-set={_NO_DAC}", sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )


def _assert_one_line(result: subprocess.CompletedProcess[str], path: Path) -> None:
    import re

    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr[-3000:]
    assert re.match(DENIED.format(path=re.escape(str(path))), lines[0]), lines[0]


@pytest.fixture
def dataset(golden_dataset: Path, tmp_path: Path) -> Path:
    """A private copy of the golden dataset (its files get their modes changed)."""
    copy = tmp_path / "dataset"
    shutil.copytree(golden_dataset, copy)
    return copy


@pytest.mark.parametrize("name", ["manifest.json", "index.parquet", "shards/shard-000000.tar"])
def test_an_unreadable_dataset_file_is_one_line_from_data_validate(
    dataset: Path, tmp_path: Path, name: str
) -> None:
    target = dataset / name
    target.chmod(0)
    result = _run_without_dac(
        ["-m", "platform_lib.cli", "data", "validate", str(dataset)], tmp_path / "home"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    _assert_one_line(result, target)


@pytest.mark.parametrize("what", ["log", "root"])
def test_an_unreadable_raw_log_is_one_line_from_data_build(
    synthetic_root: Path, tmp_path: Path, what: str
) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(synthetic_root, raw)
    target = raw / "synth-0001" if what == "log" else raw  # a raw file: already one line
    target.chmod(0)
    result = _run_without_dac(
        [
            "-m",
            "platform_lib.cli",
            "data",
            "build",
            "--source",
            "synthetic",
            "--input",
            str(raw),
            "--output",
            str(tmp_path / "out"),
        ],
        tmp_path / "home",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    _assert_one_line(result, target)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_an_unreadable_triage_log_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("RuntimeError: CUDA out of memory\n")
    log.chmod(0)
    result = _run_without_dac(["-m", "platform_lib.cli", "triage", str(log)], tmp_path / "home")
    assert result.returncode == 2, result.stderr[-3000:]
    _assert_one_line(result, log)


_TASK = """
import sys
from tasks.evaluation import {task}
try:
    {task}({arg}=sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize(
    ("task", "arg", "name"),
    [("resolve_slice_spec", "spec", "spec.yaml"), ("hash_dataset", "dataset", "manifest.json")],
    ids=["spec", "dataset-manifest"],
)
def test_an_unreadable_evaluate_model_input_is_one_line(
    dataset: Path, tmp_path: Path, task: str, arg: str, name: str
) -> None:
    """`evaluate_model --spec` and `--dataset`: the task prints the line and fails as a user error."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("slices:\n  - name: all\n")
    target = spec if arg == "spec" else dataset / name
    target.chmod(0)
    given = spec if arg == "spec" else dataset
    assert load_manifest(dataset).dataset_hash  # readable to root: only the mode bits differ
    result = _run_without_dac(
        ["-c", _TASK.format(task=task, arg=arg), str(given)], tmp_path / "home"
    )
    _assert_one_line(result, target)
    assert "PipelineInputError" in result.stdout, result.stdout[-3000:]
