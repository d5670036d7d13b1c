"""Hang analysis on Flight Recorder dumps (offline, as on the files a hang leaves in <run>/hang/).

The end-to-end hang (a real gloo timeout with a rank that never joins) is in
test_training_faults.py; these cases cover what a two-rank run cannot show."""

from __future__ import annotations

from platform_lib.training.hang import CollectiveHangError, analyze_dumps, is_collective_timeout


def _dump(rank: int, seqs: dict[str, int], entered: dict[str, str] | None = None) -> dict:
    entries = [
        {
            "pg_id": int(pg),
            "collective_seq_id": seq,
            "profiling_name": name,
            "process_group": [pg, "default_pg" if pg == "0" else "ckpt"],
            "time_created_ns": 5_000_000_000,
        }
        for pg, name in (entered or {}).items()
        for seq in [seqs[pg]]
    ]
    status = {
        pg: {"last_enqueued_collective": str(seq), "last_completed_collective": str(seq - 1)}
        for pg, seq in seqs.items()
    }
    return {
        "rank": rank,
        "pid": 100 + rank,
        "host": "h",
        "flight_recorder": {"pg_status": status, "entries": entries},
        "stack": [],
    }


def test_names_the_rank_behind_and_the_ranks_that_did_not_answer():
    dumps = {
        0: _dump(0, {"0": 12, "1": 3}, {"0": "gloo:all_gather"}),
        1: _dump(1, {"0": 11, "1": 3}),
        2: _dump(2, {"0": 12, "1": 3}, {"0": "gloo:all_gather"}),
    }
    report = analyze_dumps(dumps, world_size=4)
    assert report["never_joined"] == [1] and report["no_dump"] == [3]
    (group,) = report["groups"]  # the checkpoint group (pg 1) agrees: not reported
    assert (group["pg"], group["seq"], group["collective"], group["entered"], group["missing"]) == (
        "0",
        12,
        "gloo:all_gather",
        [0, 2],
        [1],
    )
    assert group["enqueued_at"] == 5.0


def test_no_disagreement_means_no_missing_rank():
    dumps = {r: _dump(r, {"0": 7}) for r in range(2)}
    assert analyze_dumps(dumps, world_size=2) == {"never_joined": [], "no_dump": [], "groups": []}


def test_timeout_errors_are_recognised_and_the_error_pickles():
    import pickle

    assert is_collective_timeout(
        RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 8000ms")
    )
    assert is_collective_timeout(
        RuntimeError("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)")
    )
    assert not is_collective_timeout(RuntimeError("Connection closed by peer"))
    error = pickle.loads(
        pickle.dumps(CollectiveHangError("rank 1 never joined", {"never_joined": [1]}))
    )
    assert str(error) == "rank 1 never joined" and error.report == {"never_joined": [1]}
