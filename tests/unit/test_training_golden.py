"""Golden loss: the first steps of the small preset on a fixed synthetic dataset (CPU).

Regenerate with `.venv/bin/python tests/support/golden_run.py --write` (see that module).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from tests.support.golden_run import GOLDEN_PATH, RTOL, run_golden


def test_small_preset_matches_the_golden_losses(tmp_path):
    golden = json.loads(GOLDEN_PATH.read_text())
    record = run_golden(tmp_path)
    assert record["config"] == golden["config"], (
        "the small preset changed: regenerate the golden file"
    )
    assert (
        len(record["losses"]) == len(golden["losses"]) == golden["config"]["optimizer"]["max_steps"]
    )
    np.testing.assert_allclose(record["losses"], golden["losses"], rtol=RTOL, atol=0.0)
    assert golden["torch_version"].split("+")[0] == torch.__version__.split("+")[0]
    assert golden["losses"][-1] < golden["losses"][0]
