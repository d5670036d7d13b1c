"""Triage evidence from a real ChildFailedError of a failed 2-rank launch (torch elastic); the
in-process classification tests are in tests/unit/test_triage_classify.py.
"""

from __future__ import annotations

import pytest

from platform_lib.triage.attempt import evidence_from_child_failure
from platform_lib.triage.classifier import classify
from platform_lib.triage.taxonomy import FailureClass

C = FailureClass


@pytest.mark.slow
@pytest.mark.distributed
def test_evidence_from_a_real_child_failed_error(tmp_path) -> None:
    """The hook's path end to end: a real 2-rank elastic launch fails, its exception is triaged."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from platform_lib.training.config import replace
    from platform_lib.training.launch import launch_local
    from platform_lib.training.presets import get_preset

    cfg = get_preset("small")
    cfg = replace(cfg, optimizer=replace(cfg.optimizer, max_steps=2, warmup_steps=1))
    with pytest.raises(ChildFailedError) as failed:
        launch_local(cfg, str(tmp_path / "no-dataset"), str(tmp_path / "run"), nproc=2)
    evidence = evidence_from_child_failure(failed.value)
    assert {e.rank for e in evidence.exits} <= {0, 1} and evidence.exits
    verdict = classify(evidence)
    assert verdict.failure_class is C.DATA and verdict.rank in (0, 1)
    assert "ManifestMissingError" in verdict.root_line and verdict.pid is not None
