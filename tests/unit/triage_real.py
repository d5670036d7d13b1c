"""Real failed runs on CPU whose logs form part (a) of the triage corpus.

Each `produce_*` function runs a real process (the training launcher with 2 spawned ranks,
the dataset builder, a config resolution) that fails the way a user's run fails, and returns
its combined stdout+stderr. Nothing is simulated: the failure is caused (a path that does not
exist, an impossible config field, bytes overwritten inside a shard, an address-space limit
via RLIMIT_AS, a `kill -9` of a rank from outside, an absurd learning rate; the hang and the
SIGTERM use the training's documented fault switch `DRIVETRAIN_FAULTS`) and the log is what the platform printed.

Regenerate the committed logs in tests/data/triage/real/ with

    .venv/bin/python tests/unit/triage_real.py --write

(takes ~1-2 min on 2 cores); `test_triage_corpus.py` reads them, and its slow test
regenerates the cheap ones and checks that the verdict's class and root fingerprint hold.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

REAL_DIR = Path(__file__).resolve().parents[1] / "data" / "triage" / "real"
_SMALL = """
from platform_lib.training.config import replace
from platform_lib.training.launch import launch_local
from platform_lib.training.presets import get_preset
cfg = get_preset("small")
cfg = replace(cfg, optimizer=replace(cfg.optimizer, max_steps=4, warmup_steps=1),
              checkpoint=replace(cfg.checkpoint, interval=2))
"""


def _run(
    script: str,
    *args: str,
    limit_as_bytes: int | None = None,
    timeout: float = 300,
    faults: str | None = None,
) -> str:
    """Run `script` with the venv's python; return stdout+stderr (it must fail).

    `faults` is a DRIVETRAIN_FAULTS value (platform_lib/training/faults.py) for the run.
    """

    def limit() -> None:  # runs in the child before exec: an address-space limit, inherited
        if limit_as_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as_bytes, limit_as_bytes))

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if faults is not None:
        env["DRIVETRAIN_FAULTS"] = faults
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=limit if limit_as_bytes else None,
    )
    if proc.returncode == 0:
        raise RuntimeError(f"expected the run to fail, it succeeded:\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def _build_dataset(folder: Path) -> Path:
    """Build a small synthetic dataset (4 logs x 6 frames, 1 MB shards) with the real builder."""
    out = folder / "dataset"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "platform_lib.cli",
            "data",
            "build",
            "--source",
            "synthetic",
            "--input",
            str(folder / "raw"),
            "--output",
            str(out),
            "--num-logs",
            "4",
            "--frames-per-log",
            "6",
            "--shard-size-mb",
            "1",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def produce_missing_dataset(tmp: Path) -> str:
    """2-rank training on a dataset folder that does not exist."""
    return _run(
        _SMALL + "import sys\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n",
        str(tmp / "no-such-dataset"),
        str(tmp / "run"),
    )


def produce_bad_config(tmp: Path) -> str:
    """A preset with an impossible override (negative learning rate)."""
    return _run(_SMALL + "cfg = replace(cfg, optimizer=replace(cfg.optimizer, lr=-0.5))\n")


def produce_corrupt_shard(tmp: Path) -> str:
    """2-rank training on a dataset whose shards had 4 KiB overwritten in the middle."""
    dataset = _build_dataset(tmp)
    for shard in sorted((dataset / "shards").glob("*.tar")):
        with open(shard, "r+b") as f:
            f.seek(shard.stat().st_size // 2)
            f.write(b"\xa5" * 4096)
    return _run(
        _SMALL + "import sys\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n",
        str(dataset),
        str(tmp / "run"),
    )


def produce_host_oom(tmp: Path) -> str:
    """2-rank training whose ranks run under a 3 GiB address-space limit (RLIMIT_AS).

    The limit is set in the launcher before exec and inherited by the spawned ranks; the
    batch (64 samples) needs more than the limit leaves after importing torch.
    """
    dataset = _build_dataset(tmp)
    script = _SMALL + (
        "import sys\ncfg = replace(cfg, data=replace(cfg.data, batch_size=64))\n"
        "launch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    )
    return _run(script, str(dataset), str(tmp / "run"), limit_as_bytes=3 << 30)


def produce_kill9_rank1(tmp: Path) -> str:
    """2-rank training; once step 1 is logged, `kill -9` of local rank 1 from outside.

    The ranks are the launcher's `spawn_main` children, started in local-rank order (so the
    second pid is local rank 1). No fault injection inside the process: a real SIGKILL, as
    from the OOM killer or an operator, with nothing else in the log to explain it.
    """
    dataset = _build_dataset(tmp)
    script = _SMALL + (
        "import sys\ncfg = replace(cfg, optimizer=replace(cfg.optimizer, "
        "max_steps=400))\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    )
    log = tmp / "kill9.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), str(dataset), str(tmp / "run")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 240
        while "[drivetrain train] step 1/" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"training did not reach step 1:\n{log.read_text()}")
            time.sleep(0.2)
        ranks = sorted(
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent(p) == proc.pid and b"spawn_main" in _cmdline(p)
        )
        os.kill(ranks[1], signal.SIGKILL)
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return log.read_text()


def produce_nan_loss_lr(tmp: Path) -> str:
    """2-rank training with an absurd learning rate (1e9): the loss diverges to NaN/inf."""
    dataset = _build_dataset(tmp)
    script = _SMALL + (
        "import sys\ncfg = replace(cfg, optimizer=replace(cfg.optimizer, lr=1e9, "
        "max_steps=12))\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    )
    return _run(script, str(dataset), str(tmp / "run"))


def produce_hang_rank1(tmp: Path) -> str:
    """Rank 1 stops before step 2's first collective (fault switch `hang`); 8 s timeout."""
    dataset = _build_dataset(tmp)
    script = _SMALL + (
        "import sys\ncfg = replace(cfg, parallel=replace(cfg.parallel, "
        "collective_timeout_s=8.0))\n"
        "launch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    )
    faults = '[{"kind": "hang", "rank": 1, "step": 2}]'
    return _run(script, str(dataset), str(tmp / "run"), faults=faults)


def produce_sigterm_agent(tmp: Path) -> str:
    """SIGTERM to the elastic agent at step 2 (fault switch `sigterm`): a pod eviction."""
    dataset = _build_dataset(tmp)
    script = _SMALL + "import sys\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    faults = '[{"kind": "sigterm", "rank": 0, "step": 2, "target": "agent"}]'
    return _run(script, str(dataset), str(tmp / "run"), faults=faults)


def produce_restart_kill_then_crash(tmp: Path) -> str:
    """max_restarts=1: rank 1 is SIGKILLed at step 3 (fault switch `kill`), the group restarts
    from the step-2 checkpoint, then rank 0 raises at step 5 (`crash`): two attempts, one log."""
    script = _SMALL + (
        "import sys\ncfg = replace(cfg, optimizer=replace(cfg.optimizer, max_steps=6), "
        "checkpoint=replace(cfg.checkpoint, interval=1))\n"
        "launch_local(cfg, sys.argv[1], sys.argv[2], nproc=2, max_restarts=1)\n"
    )
    faults = (
        '[{"kind": "kill", "rank": 1, "step": 3}, '
        '{"kind": "crash", "rank": 0, "step": 5, "attempt": 1}]'
    )
    return _run(script, str(_build_dataset(tmp)), str(tmp / "run"), faults=faults)


def produce_nan_loss_rank1(tmp: Path) -> str:
    """Rank 1 gets a NaN batch at step 2 (fault switch `nan`): NaN loss on that rank only, NaN
    global gradient norm, NonFiniteError on both ranks naming rank 1, before the optimizer step."""
    script = _SMALL + "import sys\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    faults = '[{"kind": "nan", "rank": 1, "step": 2}]'
    return _run(script, str(_build_dataset(tmp)), str(tmp / "run"), faults=faults)


def produce_disk_full_checkpoint(tmp: Path) -> str:
    """Rank 1 hits ENOSPC after 4 KiB of its step-2 checkpoint file (fault switch `disk_full`):
    CheckpointSaveError on both ranks naming the step, the folder and rank 1's error."""
    script = _SMALL + "import sys\nlaunch_local(cfg, sys.argv[1], sys.argv[2], nproc=2)\n"
    faults = '[{"kind": "disk_full", "rank": 1, "step": 2, "after_bytes": 4096}]'
    return _run(script, str(_build_dataset(tmp)), str(tmp / "run"), faults=faults)


def _parent(proc_dir: Path) -> int | None:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(proc_dir: Path) -> bytes:
    try:
        return (proc_dir / "cmdline").read_bytes()
    except OSError:
        return b""


PRODUCERS: dict[str, Callable[[Path], str]] = {
    "missing_dataset": produce_missing_dataset,
    "bad_config": produce_bad_config,
    "corrupt_shard": produce_corrupt_shard,
    "host_oom_rlimit_as": produce_host_oom,
    "kill9_rank1": produce_kill9_rank1,
    "nan_loss_lr": produce_nan_loss_lr,
    "hang_rank1": produce_hang_rank1,
    "sigterm_agent": produce_sigterm_agent,
    "restart_kill_then_crash": produce_restart_kill_then_crash,
    "nan_loss_rank1": produce_nan_loss_rank1,
    "disk_full_checkpoint": produce_disk_full_checkpoint,
}


def main(argv: list[str]) -> int:
    """`--write [name ...]`: regenerate the committed logs (all, or the named ones)."""
    if not argv or argv[0] != "--write":
        print(__doc__)
        return 2
    for name in argv[1:] or list(PRODUCERS):
        with tempfile.TemporaryDirectory(prefix=f"triage-{name}-") as tmp:
            text = PRODUCERS[name](Path(tmp))
        (REAL_DIR / f"{name}.log").write_text(text)
        print(f"wrote {REAL_DIR / f'{name}.log'} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
