"""Faults survived by real two-rank gloo runs (torch elastic, injected with DRIVETRAIN_FAULTS):
kill -9 of a rank, kill during a checkpoint save, SIGTERM to the agent, a hung collective,
NaN loss. On CPU with a fixed seed the recovered runs end bitwise equal to an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from platform_lib.faults import ENV_VAR
from platform_lib.shards.reader import open_dataset
from platform_lib.training.checkpoint import list_checkpoints, load_weights
from platform_lib.training.data import split_keys
from platform_lib.training.loop import NonFiniteError
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import small
from platform_lib.training.train import train
from tests.support.launches import run_launcher
from tests.support.parallel import run_concurrently

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

#: 8 steps, checkpoints after steps 3, 6 and 8 (fp32 small preset: bitwise reproducible on CPU).
CFG = apply_overrides(small(), {"max_steps": 8, "checkpoint.interval": 3})


@pytest.fixture(scope="module")
def dataset(golden_dataset: Path) -> Path:
    return golden_dataset


#: The three faults of the `crashed` run (see there).
CRASH_FAULTS = [
    {"kind": "kill", "rank": 1, "step": 5},
    {"kind": "kill_in_save", "rank": 1, "step": 6, "attempt": 1},
    {"kind": "sigterm", "rank": 0, "step": 7, "attempt": 2, "target": "self"},
]


@pytest.fixture(scope="module")
def launches(dataset, tmp_path_factory) -> dict:
    """The uninterrupted and the crashed run, launched together (independent launches, each
    with its own rendezvous and output folder): name -> (outcome, output folder)."""
    outs = {name: tmp_path_factory.mktemp(name) for name in ("baseline", "crashed")}
    outcomes = run_concurrently(
        {
            "baseline": lambda: run_launcher(CFG, dataset, outs["baseline"]),
            "crashed": lambda: run_launcher(
                CFG, dataset, outs["crashed"], max_restarts=3, faults=CRASH_FAULTS
            ),
        }
    )
    return {name: (outcomes[name], outs[name]) for name in outs}


@pytest.fixture(scope="module")
def baseline(launches):
    outcome, out = launches["baseline"]
    assert outcome.returncode == 0, outcome.log[-3000:]
    return outcome, out


@pytest.fixture(scope="module")
def crashed(launches):
    """One run, three faults, three elastic restarts: kill -9 of rank 1 before step 5; after
    the restart kill -9 of rank 1 while it writes the step-6 checkpoint; after the next one
    SIGTERM to rank 0 during step 7 (preemption resumed within the same launch, as after a
    Kueue suspend/resume inside one Flyte attempt)."""
    outcome, out = launches["crashed"]
    assert outcome.returncode == 0, outcome.log[-3000:]
    return outcome, out


def _assert_bitwise_equal(a: str | Path, b: str | Path) -> None:
    wa, wb = load_weights(a), load_weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), [
        k for k in wa if not torch.equal(wa[k], wb[k])
    ]


def _restarts(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "restarts.jsonl").read_text().splitlines()]


def test_killed_rank_restarts_and_finishes_bitwise_equal(baseline, crashed):
    (_, base_out), (outcome, out) = baseline, crashed
    assert (
        "injecting kill: firing 1 of 1" in outcome.log and "injecting kill_in_save" in outcome.log
    )
    assert (
        outcome.result["num_steps"] == CFG.optimizer.max_steps and outcome.result["restarts"] == 3
    )
    _assert_bitwise_equal(base_out / "model.safetensors", out / "model.safetensors")
    base_metrics = [
        json.loads(r)["loss"] for r in (base_out / "metrics.jsonl").read_text().splitlines()
    ]
    metrics = [json.loads(r)["loss"] for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics == base_metrics  # one row per step, the lost ones rewritten with equal losses


def test_steps_lost_are_the_steps_since_the_last_checkpoint(crashed):
    outcome, out = crashed
    first, second, third = _restarts(out)
    assert (first["restored_step"], first["failed_after_step"], first["steps_lost"]) == (3, 4, 1)
    # killed while writing step 6: the partial step-6 folder is ignored, step 3 restores
    assert (second["restored_step"], second["failed_after_step"], second["steps_lost"]) == (3, 6, 3)
    # SIGTERM: the final checkpoint of step 7 (not a periodic one) restores, nothing lost
    assert (third["restored_step"], third["failed_after_step"], third["steps_lost"]) == (7, 7, 0)
    assert outcome.result["steps_lost"] == 4 and outcome.result["restart_badput_s"] > 0
    assert [first["attempt"], second["attempt"], third["attempt"]] == [1, 2, 3]
    assert [(s, done) for s, _, done in list_checkpoints(out / "checkpoints")] == [
        (7, True),
        (8, True),
    ]


def test_sigterm_within_a_launch_is_a_recoverable_exit_after_a_final_checkpoint(crashed):
    outcome, _ = crashed
    lines = [line for line in outcome.log.splitlines() if "preempted by SIGTERM" in line]
    assert any("rank 0 pid" in line and "after step 7; final checkpoint" in line for line in lines)
    assert any(
        "rank 1 pid" in line and "preempted by signal on another rank after step 7" in line
        for line in outcome.log.splitlines()
    )
    assert all("restart to resume (recoverable)" in line for line in lines)


def test_loader_position_resumes_exactly(dataset, baseline, crashed):
    """The sample ledger of the recovered run equals the uninterrupted one: no sample seen
    twice or skipped; and within an epoch every training sample appears once."""
    (_, base_out), (_, out) = baseline, crashed
    n_train = len(split_keys(open_dataset(dataset), CFG.data.train_split))
    order: list[str] = []
    for rank in (0, 1):
        base = (base_out / "samples" / f"rank-{rank:05d}.jsonl").read_text()
        assert (out / "samples" / f"rank-{rank:05d}.jsonl").read_text() == base
    rows = [
        [
            json.loads(line)
            for line in (out / "samples" / f"rank-{r:05d}.jsonl").read_text().splitlines()
        ]
        for r in (0, 1)
    ]
    assert [r["step"] for r in rows[0]] == list(range(1, CFG.optimizer.max_steps + 1))
    for step_rows in zip(*rows, strict=True):
        order.extend(k for row in step_rows for k in row["keys"])
    for start in range(0, len(order) - n_train + 1, n_train):
        assert len(set(order[start : start + n_train])) == n_train  # a full epoch: each sample once


@pytest.mark.slow
def test_sigterm_to_the_agent_saves_a_final_checkpoint_then_a_new_launch_resumes_exactly(
    dataset, baseline, tmp_path
):
    """A pod eviction: SIGTERM to the agent, which forwards it; the next launch resumes."""
    _, base_out = baseline
    out = tmp_path / "preempted"
    cfg = apply_overrides(CFG, {"checkpoint.preemption_grace_s": 20})
    first = run_launcher(cfg, dataset, out, faults=[{"kind": "sigterm", "rank": 0, "step": 5}])
    assert first.returncode != 0 and first.result is None
    assert "Received 15 death signal" in first.log  # the agent got SIGTERM and forwarded it
    # both ranks stop after the same step; a rank whose own SIGTERM arrived after the per-step
    # agreement reports "preempted by signal on another rank"
    lines = [
        line
        for line in first.log.splitlines()
        if "[drivetrain train] rank" in line and "preempted by" in line
    ]
    assert len(lines) == 2 and any("preempted by SIGTERM after step" in line for line in lines)
    assert all("restart to resume (recoverable)" in line for line in lines)
    stopped = int(lines[0].split("after step ")[1].split(";")[0])
    assert stopped == int(lines[1].split("after step ")[1].split(";")[0])
    assert 5 <= stopped < CFG.optimizer.max_steps and stopped % 3  # not a periodic checkpoint step
    assert (out / "checkpoints" / f"step-{stopped:06d}" / ".metadata").is_file()

    second = run_launcher(cfg, dataset, out)
    assert second.returncode == 0, second.log[-3000:]
    assert _restarts(out)[-1] == {**_restarts(out)[-1], "restored_step": stopped, "steps_lost": 0}
    _assert_bitwise_equal(base_out / "model.safetensors", out / "model.safetensors")


def test_hung_rank_is_detected_within_the_timeout_and_named(dataset, tmp_path):
    out = tmp_path / "hung"
    timeout_s = 8.0
    cfg = apply_overrides(
        CFG, {"parallel.collective_timeout_s": timeout_s, "checkpoint.preemption_grace_s": 2}
    )
    outcome = run_launcher(cfg, dataset, out, faults=[{"kind": "hang", "rank": 1, "step": 4}])
    assert outcome.returncode != 0
    assert "CollectiveHangError: collective timeout (8 s) detected on rank 0" in outcome.log
    assert (
        "rank(s) [1] never joined collective" in outcome.log and "hung rank 1 (pid" in outcome.log
    )
    report = json.loads((out / "hang" / "report.json").read_text())
    assert report["never_joined"] == [1] and report["no_dump"] == []
    group = report["groups"][0]
    assert group["entered"] == [0] and group["collective"].startswith("gloo:")
    hung_dump = report["dumps"]["1"]
    assert any("faults.py" in frame and "at_step" in frame for frame in hung_dump["stack"])
    assert hung_dump["flight_recorder"]["entries"], "gloo collectives are in the Flight Recorder"
    # detected when the collective has waited the timeout (Flight Recorder enqueue time -> detection)
    assert timeout_s - 0.5 <= report["detected_at"] - group["enqueued_at"] <= timeout_s + 3


def test_nan_loss_stops_before_the_optimizer_step(dataset, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(ENV_VAR, json.dumps([{"kind": "nan", "rank": 0, "step": 2}]))
    with pytest.raises(
        NonFiniteError,
        match=r"step 2: the global gradient norm is nan.*non-finite local loss on "
        r"rank\(s\) \[0\]",
    ):
        train(apply_overrides(CFG, {"max_steps": 3}), str(dataset), str(tmp_path / "nan"))
    assert "injecting nan" in capfd.readouterr().err
    assert [
        json.loads(r)["step"] for r in (tmp_path / "nan" / "metrics.jsonl").read_text().splitlines()
    ] == [1]
