"""`bench/gpu_check.py --dry-run`: the device check script runs end to end on the CPU (tiny sizes),
each check in its own child process, and writes its JSON; what a borrowed GPU machine runs in full."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"

pytestmark = pytest.mark.timeout(400)


def test_dry_run_passes_every_check_on_the_cpu_and_writes_json(pandaset_root, tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dry-run",
            "--frames",
            str(pandaset_root / "002" / "camera"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=380,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert list(results) == ["versions", "decode", "fsdp_step", "train_decode", "layouts"]
    assert all(r["status"] == "ok" for r in results.values()), results
    decode = results["decode"]["result"]
    assert decode["frames"] == 2 and decode["size"] == "1920x1080"
    assert decode["cpu_full"]["frames_per_s"] > 0 and decode["cpu_704x256"]["frames_per_s"] > 0
    step = results["fsdp_step"]["result"]
    assert step["step_s_median"] > 0 and step["flops_per_sample"] > 0
    assert 0 < step["mfu"] < 1 and step["peak"]["device"] == "cpu"
    train = results["train_decode"]["result"]
    assert len(train["decode_ms_per_batch"]) == 3 and train["decode_ms_median"] > 0
    assert train["cameras_per_batch"] == 6 and train["mean_abs_diff_levels"] == 0.0  # CPU twin
    layouts = results["layouts"]["result"]
    assert layouts["ranks"] == 2 and layouts["precision"] == "fp32"
    for name in ("fsdp", "fsdp_tp2", "pp2_fsdp"):  # 5 steps each, as the single process
        run = layouts[name]
        assert len(run["losses"]) == 5 and run["max_rel_loss_diff"] <= 1e-5, (name, run)
        assert len(run["param_bytes_per_rank"]) == 2 and run["step_s_median"] > 0
    # 2-way sharding holds half the model per rank; the two stages together hold all of it
    assert layouts["fsdp"]["param_bytes_per_rank"][0] == pytest.approx(
        layouts["model_bytes"] / 2, rel=0.05
    )
    assert sum(layouts["pp2_fsdp"]["param_bytes_per_rank"]) == pytest.approx(
        layouts["model_bytes"], rel=0.01
    )


def test_a_failing_check_fails_the_run_and_names_it(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--only", "decode", "--frames", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 1
    assert "gpu_check: FAILED decode" in done.stderr
    assert "no */*.jpg under" in done.stdout
