"""bench/checkpoint.py runs end to end on the small preset (2 gloo ranks) and prints every row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_checkpoint_bench_prints_sync_async_peer_and_limits(tmp_path):
    bench = Path(__file__).resolve().parents[2] / "bench" / "checkpoint.py"
    proc = subprocess.run(
        [
            sys.executable,
            str(bench),
            "--workloads",
            "bev_fusion_small",
            "--reps",
            "1",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for method in ("copy limit", "write limit", "sync DCP", "async DCP", "peer torch.save"):
        assert f"bev_fusion_small        1.1  {method}" in proc.stdout
    assert "async save blocks" in proc.stdout
    assert (tmp_path / "bev_fusion_small" / "async").is_dir()
