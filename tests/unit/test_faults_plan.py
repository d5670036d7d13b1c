"""The `batch_delay` fault: the per-batch input stall tests inject instead of a config field."""

from __future__ import annotations

import json
import time

import pytest

from platform_lib.faults import ENV_VAR, FaultPlan
from platform_lib.training.data import iterate_epochs


def _plan(faults: list[dict], rank: int) -> FaultPlan:
    return FaultPlan.from_env(rank=rank, environ={ENV_VAR: json.dumps(faults)})


def test_batch_delay_holds_every_batch_of_its_rank_only(capsys):
    faults = [{"kind": "batch_delay", "step": 1, "rank": 1, "seconds": 0.05}]
    assert _plan(faults, rank=0).batch_delay_s() == 0.0
    delay = _plan(faults, rank=1).batch_delay_s()
    assert delay == 0.05
    assert "injecting batch_delay: 0.05 s before every batch" in capsys.readouterr().err
    batches = iterate_epochs([1, 2], delay)
    start = time.perf_counter()
    assert [next(batches) for _ in range(4)] == [1, 2, 1, 2]  # epoch after epoch
    assert time.perf_counter() - start >= 4 * 0.05


@pytest.mark.parametrize("fault", [{"seconds": 0}, {"seconds": 1, "step": 3}])
def test_batch_delay_needs_seconds_and_the_first_step(fault):
    with pytest.raises(ValueError, match=f"batch_delay needs seconds > 0 and step 1.*{ENV_VAR}"):
        _plan([{"kind": "batch_delay", "step": 1, **fault}], rank=0)
