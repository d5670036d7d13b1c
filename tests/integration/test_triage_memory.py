"""`drivetrain triage` of a ~50 MB collector log runs in bounded memory (streamed, not read whole).

The log (coloured, CRLF, 64 ranks, corpus noise, a data error at the end) is written by the
benchmark's generator; triage runs in a subprocess whose peak RSS is read from
`getrusage(RUSAGE_CHILDREN)`. Reading the whole log and keeping a record per line, as triage
did before, takes several times the log's size.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Peak RSS allowed for triage of a 50 MB log, in MiB (the interpreter and imports are ~100).
PEAK_MIB = 180


def _bench():
    spec = importlib.util.spec_from_file_location("bench_triage", ROOT / "bench" / "triage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triage_of_a_50mb_log_stays_small(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    _bench().write_log(log, 50)
    code = (
        "import sys\n"
        "from platform_lib.cli import main\n"
        "rc = main(['triage', sys.argv[1], '--json'])\n"
        # VmHWM is this program's own peak: ru_maxrss would count the forking pytest's pages
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print('PEAK_KIB', hwm)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdict, peak = done.stdout.rsplit("PEAK_KIB", 1)
    assert json.loads(verdict)["class"] == "data"  # the failure at the end was found
    peak_mib = int(peak) / 1024
    assert peak_mib < PEAK_MIB, f"peak RSS {peak_mib:.0f} MiB for a 50 MB log"
