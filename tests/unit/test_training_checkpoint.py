"""Checkpointer in one process (world size 1, gloo): DCP's commit, partial folders, retention,
async save, RNG state, object storage (moto S3 on 127.0.0.1), injected storage faults."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from platform_lib.faults import ENV_VAR, FaultPlan, FaultSpec
from platform_lib.training.checkpoint import (
    Checkpointer,
    CheckpointSaveError,
    capture_rng_state,
    find_latest_checkpoint,
    list_checkpoints,
    restore_rng_state,
)


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor().clone() for k, v in model.state_dict().items()}


def _perturb(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)


def test_save_commits_with_dcp_metadata_and_restores_everything(trained, tmp_path):
    model, optimizer = trained
    ckpt = Checkpointer(tmp_path / "ckpt")
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    rng = capture_rng_state()
    saved = ckpt.save(
        3, model, optimizer, {"step": 3, "rng": rng, "loader": {"epoch": 1, "consumed_samples": 8}}
    )
    expected_rng = (torch.rand(3), np.random.rand(3), random.random())
    weights, moments = (
        _weights(model),
        optimizer.state_dict()["state"][0]["exp_avg"].full_tensor().clone(),
    )
    folder = Path(saved.path)
    assert folder.name == "step-000003" and (folder / ".metadata").is_file()
    assert not [
        p for p in folder.iterdir() if p.suffix not in (".distcp", "") and p.name != ".metadata"
    ]

    _perturb(model)
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    state = ckpt.load(ckpt.latest(), model, optimizer)
    restore_rng_state(state["rng"])
    assert state["step"] == 3 and state["loader"] == {"epoch": 1, "consumed_samples": 8}
    assert all(torch.equal(weights[k], v) for k, v in _weights(model).items())
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"].full_tensor(), moments)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(again[0], expected_rng[0]) and np.array_equal(again[1], expected_rng[1])
    assert again[2] == expected_rng[2]
    assert saved.blocking_s > 0 and not saved.asynchronous


def test_a_partial_checkpoint_is_ignored(trained, tmp_path):
    model, optimizer = trained
    root = tmp_path / "ckpt"
    ckpt = Checkpointer(root, keep=5)
    ckpt.save(2, model, optimizer, {"step": 2})
    ckpt.save(4, model, optimizer, {"step": 4})
    (root / "step-000004" / ".metadata").unlink()  # as if killed before DCP's commit
    (root / "step-000006").mkdir()  # as if killed right after creating the folder
    assert [(s, done) for s, _, done in list_checkpoints(root)] == [
        (2, True),
        (4, False),
        (6, False),
    ]
    assert find_latest_checkpoint(root) == str(root / "step-000002")
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        ckpt.load(str(root / "step-000004"), model, optimizer)
    assert ckpt.load(ckpt.latest(), model, optimizer)["step"] == 2
    ckpt.save(
        4, model, optimizer, {"step": 4}
    )  # the same step again: leftovers replaced, then committed
    assert find_latest_checkpoint(root) == str(root / "step-000004")


def test_retention_keeps_the_newest_complete_and_drops_stale_partials(trained, tmp_path):
    model, optimizer = trained
    root = tmp_path / "ckpt"
    ckpt = Checkpointer(root, keep=2)
    ckpt.save(1, model, optimizer, {"step": 1})
    (root / "step-000002").mkdir()  # a partial save older than what follows
    for step in (3, 4, 5):
        ckpt.save(step, model, optimizer, {"step": step})
    assert sorted(p.name for p in root.iterdir()) == ["step-000004", "step-000005"]


def test_async_save_stages_a_copy_and_commits_in_the_background(trained, tmp_path):
    model, optimizer = trained
    ckpt = Checkpointer(tmp_path / "ckpt", async_save=True)
    weights = _weights(model)
    saved = ckpt.save(5, model, optimizer, {"step": 5})
    _perturb(model)  # training goes on while the background thread writes
    assert saved.asynchronous and ckpt.wait() >= 0.0
    assert (Path(saved.path) / ".metadata").is_file()
    ckpt.load(saved.path, model, optimizer)
    assert all(
        torch.equal(weights[k], v) for k, v in _weights(model).items()
    )  # the staged copy was written
    ckpt.close()


def _plan(**fault) -> FaultPlan:
    return FaultPlan.from_env(rank=0, environ={ENV_VAR: json.dumps([fault])})


def test_transient_storage_error_is_retried(trained, tmp_path, capfd):
    model, optimizer = trained
    plan = _plan(kind="storage_error", step=2, times=2)
    ckpt = Checkpointer(
        tmp_path / "ckpt", retries=3, retry_backoff_s=0.05, storage_hook=plan.wrap_storage
    )
    saved = ckpt.save(2, model, optimizer, {"step": 2})
    assert find_latest_checkpoint(tmp_path / "ckpt") == saved.path
    assert (
        capfd.readouterr().err.count("injecting storage_error") == 2
    )  # two failures, third attempt commits


def test_async_save_failing_transiently_is_skipped_and_counted(trained, tmp_path):
    model, optimizer = trained
    plan = _plan(kind="storage_error", step=2)
    ckpt = Checkpointer(tmp_path / "ckpt", async_save=True, storage_hook=plan.wrap_storage)
    ckpt.save(1, model, optimizer, {"step": 1})
    ckpt.save(2, model, optimizer, {"step": 2})
    with pytest.warns(UserWarning, match="async checkpoint step 2 skipped"):
        ckpt.wait()
    assert [s for s, _ in ckpt.failed_saves] == [2] and "Connection reset" in ckpt.failed_saves[0][
        1
    ]
    assert [(s, done) for s, _, done in list_checkpoints(tmp_path / "ckpt")] == [(1, True)]
    ckpt.close()


def test_disk_full_during_a_save_keeps_the_previous_checkpoint(trained, tmp_path):
    model, optimizer = trained
    root = tmp_path / "ckpt"
    plan = _plan(kind="disk_full", step=2, after_bytes=100)
    ckpt = Checkpointer(root, storage_hook=plan.wrap_storage)
    ckpt.save(1, model, optimizer, {"step": 1})
    with pytest.raises(CheckpointSaveError, match=r"step 2 .*No space left on device") as raised:
        ckpt.save(2, model, optimizer, {"step": 2})
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == 28
    assert sorted(p.name for p in root.iterdir()) == ["step-000001"]  # partial folder removed
    assert ckpt.load(ckpt.latest(), model, optimizer)["step"] == 1


def test_fault_spec_validation_names_the_variable():
    with pytest.raises(ValueError, match=f"kind must be one of.*{ENV_VAR}"):
        FaultPlan.from_env(rank=0, environ={ENV_VAR: '[{"kind": "meteor", "step": 1}]'})
    with pytest.raises(ValueError, match="unknown fault field"):
        FaultPlan.from_env(rank=0, environ={ENV_VAR: '[{"kind": "kill", "step": 1, "when": 2}]'})
    with pytest.raises(ValueError, match="not JSON"):
        FaultPlan.from_env(rank=0, environ={ENV_VAR: "kill@1"})
    plan = FaultPlan(
        [FaultSpec(kind="kill", step=3, rank=1), FaultSpec(kind="crash", step=2, attempt=1)],
        rank=1,
        attempt=0,
    )
    assert [f.kind for f in plan.faults] == [
        "kill"
    ]  # other ranks' and later attempts' faults are not ours
    assert not FaultPlan.from_env(rank=0, environ={})


def test_rng_state_round_trip_is_exact():
    state = capture_rng_state()
    first = (torch.randn(4), np.random.randn(4), random.random())
    restore_rng_state(state)
    assert torch.equal(torch.randn(4), first[0]) and np.array_equal(np.random.randn(4), first[1])
    assert random.random() == first[2]


def test_copying_a_checkpoint_folder_keeps_it_loadable(trained, tmp_path):
    """A step folder (DCP metadata + data files) and its ledger are self-contained: copy them."""
    model, optimizer = trained
    saved = Checkpointer(tmp_path / "a").save(9, model, optimizer, {"step": 9})
    shutil.copytree(saved.path, tmp_path / "b" / "step-000009")
    shutil.copy(tmp_path / "a.ledger.json", tmp_path / "b.ledger.json")
    assert (
        Checkpointer(tmp_path / "b").load(str(tmp_path / "b" / "step-000009"), model, optimizer)[
            "step"
        ]
        == 9
    )
