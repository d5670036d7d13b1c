"""`data build` names the folder the user must fix when mode bits refuse it (TRIAL2, finding F).

Run as root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (`setpriv`), so the kernel applies
mode bits. An unreadable `--input` folder was named by a file inside it (`<input>/meta.json`,
`<input>/lidar/poses.json`), even an empty one where that file does not exist; a read-only
parent of `--output` was named by the hidden `.out.staging-<pid>-...` folder. Now the line
names the `--input` folder itself, or the `--output`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
_NO_DAC = "-dac_override,-dac_read_search"


def _build_without_dac(tmp_path: Path, source: str, raw: Path, output: Path) -> str:
    """Run `drivetrain data build` obeying mode bits; return its one `error:` line."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    env = os.environ | {"PYTHONPATH": str(REPO), "DRIVETRAIN_HOME": str(tmp_path / "home")}
    argv = ["-m", "platform_lib.cli", "data", "build", "--source", source, "--input", str(raw)]
    result = subprocess.run(
        [setpriv, f"--inh-caps={_NO_DAC}", f"--bounding-set={_NO_DAC}", sys.executable, *argv]
        + ["--output", str(output)],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize("source", ["pandaset", "synthetic"])
@pytest.mark.parametrize("empty", [False, True])
def test_an_unreadable_input_folder_is_named_not_a_file_inside_it(
    synthetic_root: Path, tmp_path: Path, source: str, empty: bool
) -> None:
    raw = tmp_path / "raw"
    if empty:
        raw.mkdir()
    else:
        shutil.copytree(synthetic_root / "synth-0000", raw / "synth-0000")
    raw.chmod(0)
    line = _build_without_dac(tmp_path, source, raw, tmp_path / "out")
    assert re.match(rf"^error: permission denied.* \({re.escape(str(raw))}\): ", line), line
    assert "meta.json" not in line and "poses.json" not in line


def test_a_read_only_output_parent_names_the_output_not_its_staging_folder(
    synthetic_root: Path, tmp_path: Path
) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(synthetic_root / "synth-0000", raw / "synth-0000")
    parent = tmp_path / "read-only"
    parent.mkdir()
    parent.chmod(0o555)
    output = parent / "out"
    line = _build_without_dac(tmp_path, "synthetic", raw, output)
    assert re.match(rf"^error: permission denied.* \({re.escape(str(output))}\): ", line), line
    assert ".staging-" not in line and "--output" in line
    assert list(parent.iterdir()) == []
