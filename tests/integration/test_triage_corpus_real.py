"""Real failed runs regenerated (tests/support/triage_real.py: launches, builds, OOM, kill -9)
keep their verdict's class and root fingerprint; the corpus itself is tested in
tests/unit/test_triage_corpus.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_lib.triage.classifier import classify
from platform_lib.triage.fingerprints import normalise_line
from platform_lib.triage.logs import Evidence, load_evidence

CORPUS = Path(__file__).resolve().parents[1] / "data" / "triage"
EXPECTATIONS: dict[str, dict] = json.loads((CORPUS / "expectations.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bad_config", "missing_dataset", "kill9_rank1", "nan_loss_lr"])
def test_real_failures_regenerate_with_the_same_verdict(name: str, tmp_path: Path) -> None:
    """Run the failure again for real; class and root fingerprint match the committed log."""
    from tests.support.triage_real import PRODUCERS

    fresh = classify(Evidence(logs={f"{name}.log": PRODUCERS[name](tmp_path)}))
    committed = classify(load_evidence(CORPUS / "real" / f"{name}.log"))
    assert fresh.failure_class is committed.failure_class
    assert fresh.fingerprint == committed.fingerprint  # same cause: pids, paths, times removed
    assert normalise_line(fresh.root_line) == normalise_line(committed.root_line)
