"""Smoke test of bench/loader.py (this loader and webdataset only) and bench/input_wait.py on tiny data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
pytestmark = pytest.mark.timeout(300)


def test_bench_loader_and_input_wait_run_on_tiny_data(tmp_path):
    work, rows_json = tmp_path / "work", tmp_path / "rows.json"
    result = subprocess.run(
        [sys.executable, str(BENCH / "loader.py"), "--work", str(work), "--num-logs", "1", "--frames-per-log", "3",
         "--replicas", "4", "--width", "64", "--height", "48", "--batch-size", "2", "--workers", "2",
         "--peers", "webdataset", "--repeat", "1", "--shard-size-mb", "0.2", "--json", str(rows_json)],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(rows_json.read_text())
    names = {(r["name"], r["decode"]) for r in rows}
    assert {("ours", "none"), ("ours", "cpu"), ("webdataset", "none"), ("webdataset", "cpu"),
            ("limit: seq read", "-"), ("limit: mem decode", "cpu")} <= names
    assert all(r["samples"] == 12 and r["samples_s"] > 0 for r in rows if not r["name"].startswith("limit"))
    assert "ours / this" in result.stdout
    waited = subprocess.run(
        [sys.executable, str(BENCH / "input_wait.py"), "--dataset", str(work / "dataset"), "--steps-ms", "0", "20",
         "--workers", "1", "--steps", "8", "--warmup", "2", "--batch-size", "2", "--stall-s", "0.3"],
        capture_output=True, text=True, timeout=120)
    assert waited.returncode == 0, waited.stdout + waited.stderr[-3000:]
    assert "within 10%" in waited.stdout
