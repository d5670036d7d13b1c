"""Layouts on 4 gloo ranks (real processes, CPU, fp32): the same losses as one process, memory per layout.

Each layout runs 5 steps of `world_model_small` on the same global batches as a single-process
run (`tests/support/layouts.py`); per-step losses must agree within 1e-5. Checkpoints
reshard: `train()` under one layout, resumed from its step-2 DCP checkpoint under another,
gives the same step-3 loss and exported weights. The longer matrix (HSDP, TP inside PP,
interleaved 1F1B, more resharding pairs) is marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest

from platform_lib.training.checkpoint import load_weights
from tests.support.layouts import STEPS, run_layout, train_layout
from tests.support.parallel import run_concurrently

pytestmark = pytest.mark.distributed

#: name -> (ranks, ParallelConfig degrees).
LAYOUTS = {
    "fsdp4": (4, {}),
    "fsdp2_tp2": (4, {"tp": 2}),
    "pp2_fsdp2": (4, {"pp": 2}),
}
SLOW_LAYOUTS = {
    "hsdp2x2": (4, {"dp_replicate": 2}),
    "pp2_tp2": (4, {"pp": 2, "tp": 2}),
    "pp2_interleaved_fsdp2": (4, {"pp": 2, "pp_schedule": "Interleaved1F1B"}),
}


def _run_all(tmp_path, layouts):
    calls = {
        name: (lambda n=name, r=ranks, o=degrees: run_layout(tmp_path / f"{n}.json", r, o))
        for name, (ranks, degrees) in {"single": (1, {}), **layouts}.items()
    }
    return run_concurrently(calls)


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    return _run_all(tmp_path_factory.mktemp("layouts"), LAYOUTS)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_losses_equal_a_single_process_run(default_runs, layout):
    single, run = default_runs["single"]["losses"], default_runs[layout]["losses"]
    assert len(run) == len(single) == STEPS
    np.testing.assert_allclose(run, single, rtol=0, atol=1e-5)
    assert run[-1] < run[0]  # it trains


def test_four_way_sharding_holds_a_quarter_of_the_parameters_per_rank(default_runs):
    run = default_runs["fsdp4"]
    quarter = run["model_bytes"] / 4
    assert len(run["param_bytes"]) == 4
    assert all(abs(b - quarter) <= 0.05 * quarter for b in run["param_bytes"])


def test_tp_and_pp_split_the_parameters_by_their_degrees(default_runs):
    model = default_runs["fsdp4"]["model_bytes"]
    tp, pp = default_runs["fsdp2_tp2"]["param_bytes"], default_runs["pp2_fsdp2"]["param_bytes"]
    # dp_shard=2 x tp=2: blocks split 4 ways, embedding and head 2 ways: between 1/4 and 1/2
    assert all(model / 4 < b < model / 2 for b in tp)
    # pp=2 x dp_shard=2: each stage's half of the model, sharded 2 ways, sums to the model
    assert sum(pp) == pytest.approx(model, rel=0.01) and max(pp) < model / 2


@pytest.mark.slow
def test_longer_layout_matrix_losses_equal_a_single_process_run(tmp_path):
    runs = _run_all(tmp_path, SLOW_LAYOUTS)
    for name in SLOW_LAYOUTS:
        np.testing.assert_allclose(
            runs[name]["losses"], runs["single"]["losses"], rtol=0, atol=1e-5, err_msg=name
        )
    hsdp = runs["hsdp2x2"]
    assert all(b == pytest.approx(hsdp["model_bytes"] / 2, rel=0.05) for b in hsdp["param_bytes"])


def _assert_resumed_the_same(resumed_dir, resumed_losses, source_dir, source_losses):
    assert len(resumed_losses) == len(source_losses) == 3
    np.testing.assert_allclose(resumed_losses[2], source_losses[2], rtol=0, atol=1e-5)
    source = load_weights(source_dir / "model.safetensors")
    resumed = load_weights(resumed_dir / "model.safetensors")
    assert resumed.keys() == source.keys()
    for name, weight in source.items():
        np.testing.assert_allclose(resumed[name], weight, rtol=0, atol=1e-6, err_msg=name)


def test_a_fsdp_checkpoint_resumes_as_pipeline_stages(golden_dataset, tmp_path):
    fsdp = train_layout(golden_dataset, tmp_path / "fsdp", {})
    pp = train_layout(golden_dataset, tmp_path / "pp", {"pp": 2}, resume_from=tmp_path / "fsdp")
    _assert_resumed_the_same(tmp_path / "pp", pp, tmp_path / "fsdp", fsdp)


@pytest.mark.slow
def test_checkpoints_reshard_between_fsdp_tp_pp_and_interleaved_pp(golden_dataset, tmp_path):
    interleaved = {"pp": 2, "pp_schedule": "Interleaved1F1B", "pp_microbatches": 2}
    layouts = {"fsdp": {}, "tp": {"tp": 2}, "pp": {"pp": 2}, "interleaved": interleaved}
    runs = {name: train_layout(golden_dataset, tmp_path / name, d) for name, d in layouts.items()}
    pairs = [("fsdp", "tp"), ("tp", "pp"), ("pp", "fsdp"), ("tp", "fsdp")]
    for source, target in [*pairs, ("interleaved", "fsdp"), ("fsdp", "interleaved")]:
        out = tmp_path / f"{source}_to_{target}"
        losses = train_layout(golden_dataset, out, layouts[target], resume_from=tmp_path / source)
        _assert_resumed_the_same(out, losses, tmp_path / source, runs[source])
