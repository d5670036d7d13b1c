"""A dataset build killed hard in a child process leaves no manifest; the in-process build tests
are in tests/unit/test_shards_build.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from platform_lib.shards.errors import ManifestMissingError
from platform_lib.shards.reader import open_dataset


def test_killed_build_leaves_no_manifest(tmp_path):
    """A hard kill (no cleanup runs) mid-build: partial shards exist but no manifest."""
    out = tmp_path / "ds"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from tests.support.frames import make_frames
        from platform_lib.shards.build import BuildConfig, write_dataset
        def frames():
            for i, f in enumerate(make_frames()):
                if i == 6:
                    os._exit(9)
                yield f
        write_dataset(frames(), {str(out)!r}, BuildConfig(shard_size_mb=0.03, progress=False),
                      source="t", source_logs=[])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 9, result.stderr.decode()
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".ds.staging-")]
    assert len(staging) == 1 and list(staging[0].glob("shards/*.tar"))
    assert list(tmp_path.rglob("manifest.json")) == []
    for folder in (out, staging[0]):
        with pytest.raises(ManifestMissingError, match="rebuild"):
            open_dataset(folder)
