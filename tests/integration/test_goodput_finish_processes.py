"""The finisher's exit path (garbage collection frozen before interpreter finalisation) in a
child interpreter; the in-process finisher tests are in tests/unit/test_goodput_finish.py.
"""

from __future__ import annotations

import subprocess
import sys


def test_skip_collection_at_exit_freezes_before_finalisation():
    # atexit runs handlers last-in first-out: one registered before it sees the freeze
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
        "from platform_lib.training.distributed import skip_collection_at_exit\n"
        "skip_collection_at_exit(); skip_collection_at_exit()\n"
        "print('frozen while running:', gc.get_freeze_count() > 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.splitlines() == ["frozen while running: False", "frozen at exit: True"]
