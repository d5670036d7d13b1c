"""Triage of a large collector log: wall time and peak RSS of `drivetrain triage` vs. the targets.

Writes a realistic log of `--mb` MB (default 200) into a temporary folder: step logs of many
ranks with corpus noise (NCCL INFO, warnings, retries) interleaved, ANSI colours as stern
keeps them, CRLF endings, and a corpus failure at the end; then runs `drivetrain triage` on
it in a subprocess and prints wall time and the child's peak RSS (`getrusage(RUSAGE_CHILDREN)`)
next to the targets (60 s, 300 MB) and the load average, which says how quiet the machine was.

    python bench/triage.py [--mb 200]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S, TARGET_MB = 60.0, 300.0
CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "triage" / "public"
FAILURE = CORPUS / "05_nccl_watchdog_after_data_error.log"


def write_log(path: Path, megabytes: float, ranks: int = 64, seed: int = 0) -> None:
    """Write about `megabytes` MB of coloured, CRLF, many-rank training log ending in a failure."""
    rng = random.Random(seed)
    from platform_lib.triage.classifier import match_line
    from platform_lib.triage.logs import parse_log
    from platform_lib.triage.taxonomy import Role

    noise = [  # corpus lines that neither claim a cause nor end an elastic attempt
        line.text
        for log in sorted(CORPUS.glob("*.log"))
        for line in parse_log(log.read_text(), log.name)
        if (rule := match_line(line)) is None
        or (rule.role is Role.CONTEXT and not rule.ends_attempt)
    ]
    target = int(megabytes * 1e6)
    written, step = 0, 0
    with path.open("w", newline="") as out:
        while written < target:
            step += 1
            chunk = []
            for rank in range(ranks):
                pod = f"\x1b[36mtrainer-worker-{rank // 8}\x1b[0m \x1b[33mpytorch\x1b[0m "
                stamp = f"2026-12-01 {10 + step // 3600 % 10:02d}:{step // 60 % 60:02d}:{step % 60:02d},{rank:03d}"
                chunk.append(
                    f"{pod}\x1b[1;35m[rank{rank}]:\x1b[0m {stamp} \x1b[32mINFO\x1b[0m train.py:212] "
                    f"step {step} loss {rng.uniform(0.2, 0.9):.4f} lr 3.0e-04 grad_norm "
                    f"{rng.uniform(0.5, 2):.3f} throughput {rng.uniform(700, 900):.1f} samples/s\r\n"
                )
                if rng.random() < 0.05:
                    chunk.append(f"{pod}{rng.choice(noise)}\r\n")
            text = "".join(chunk)
            out.write(text)
            written += len(text)
        out.write(FAILURE.read_text().replace("\n", "\r\n"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="log size, in MB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-triage-") as tmp:
        log = Path(tmp) / "trainer.log"
        write_log(log, args.mb)
        size_mb = log.stat().st_size / 1e6
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "platform_lib.cli", "triage", str(log)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    load = os.getloadavg()
    print(done.stdout.strip() or done.stderr.strip())
    print(
        f"log {size_mb:.0f} MB  wall {wall:.1f} s (target <= {TARGET_S:.0f} s)  "
        f"peak RSS {peak_mb:.0f} MB (target <= {TARGET_MB:.0f} MB)"
    )
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
