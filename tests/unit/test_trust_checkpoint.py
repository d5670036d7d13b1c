"""Checkpoints you can trust (world size 1, gloo): planted or tampered checkpoints and foreign
or shared folders are refused before DCP unpickles a byte; honest resumes still work."""

from __future__ import annotations

import json
import os
import pickle
import stat
import tempfile
from pathlib import Path

import pytest

from platform_lib.errors import format_user_error
from platform_lib.training.checkpoint import (
    Checkpointer,
    UntrustedCheckpointError,
    ensure_private_dir,
    make_run_dir,
)


class _Planted:
    """A pickle that, when loaded, writes a marker file (stands for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_tampered_metadata_is_refused_before_it_is_unpickled(trained, tmp_path):
    model, optimizer = trained
    ckpt = Checkpointer(tmp_path / "ckpt")
    saved = ckpt.save(2, model, optimizer, {"step": 2})
    marker = tmp_path / "marker"
    (Path(saved.path) / ".metadata").write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.raises(UntrustedCheckpointError) as raised:
        ckpt.load(ckpt.latest(), model, optimizer)
    line = format_user_error(raised.value)
    assert "\n" not in line and ".metadata differs from the sha256 recorded at commit" in line
    assert saved.path in line and not marker.exists()


def test_planted_step_folder_is_skipped_and_never_read(trained, tmp_path):
    model, optimizer = trained
    root = tmp_path / "ckpt"
    ckpt = Checkpointer(root)
    ckpt.save(2, model, optimizer, {"step": 2})
    marker = tmp_path / "marker"
    planted = root / "step-000009"
    planted.mkdir()
    (planted / ".metadata").write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.warns(UserWarning, match="skipping checkpoint .*step-000009.*not in the ledger"):
        latest = ckpt.latest()
    assert latest == str(root / "step-000002")
    with pytest.raises(UntrustedCheckpointError, match="not in the ledger"):
        ckpt.load(str(planted), model, optimizer)
    assert ckpt.load(latest, model, optimizer)["step"] == 2 and not marker.exists()


def test_tampered_data_file_is_refused(trained, tmp_path):
    model, optimizer = trained
    ckpt = Checkpointer(tmp_path / "ckpt")
    saved = ckpt.save(3, model, optimizer, {"step": 3})
    data = next(Path(saved.path).glob("*.distcp"))
    blob = bytearray(data.read_bytes())
    blob[-1] ^= 0xFF
    data.write_bytes(bytes(blob))
    with pytest.raises(UntrustedCheckpointError, match=rf"{data.name} differs from the sha256"):
        ckpt.load(saved.path, model, optimizer)


def test_honest_checkpoint_resumes_and_retention_prunes_the_ledger(trained, tmp_path):
    model, optimizer = trained
    root = tmp_path / "ckpt"
    ckpt = Checkpointer(root, keep=1)
    ckpt.save(1, model, optimizer, {"step": 1})
    ckpt.save(2, model, optimizer, {"step": 2})
    assert ckpt.load(ckpt.latest(), model, optimizer)["step"] == 2
    ledger = json.loads((tmp_path / "ckpt.ledger.json").read_text())["checkpoints"]
    assert list(ledger) == ["step-000002"] and ".metadata" in ledger["step-000002"]
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_world_writable_checkpoint_folder_is_refused(trained, tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(UntrustedCheckpointError) as raised:
        Checkpointer(root)
    line = format_user_error(raised.value)
    assert "\n" not in line and f"({root})" in line and "mode 777" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_folder_of_another_user_is_refused(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir(mode=0o755)
    os.chown(root, 65534, 65534)
    with pytest.raises(UntrustedCheckpointError) as raised:
        ensure_private_dir(root)
    line = format_user_error(raised.value)
    assert "\n" not in line and f"({root})" in line and "owned by uid 65534" in line


def test_run_folder_is_private_and_a_foreign_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run = make_run_dir("abc-1")
    base = tmp_path / f"drivetrain-train-{os.geteuid()}"
    assert run == base / "abc-1" and make_run_dir("abc-1") == run
    for folder in (base, run):
        info = folder.lstat()
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    planted = base / "abc-2"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)  # as another user's `mkdir` of a predictable name would leave it
    with pytest.raises(UntrustedCheckpointError, match=r"group or others can write.*abc-2"):
        make_run_dir("abc-2")
    (tmp_path / "elsewhere").mkdir()
    (base / "abc-3").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UntrustedCheckpointError, match="not a folder"):
        make_run_dir("abc-3")


def test_a_stalled_async_save_is_an_error_within_its_deadline(trained, tmp_path):
    """The wait for a background save has a deadline; expiry names the step and the folder."""
    import threading
    import time

    from platform_lib.training.checkpoint import CheckpointSaveError

    model, optimizer = trained
    release = threading.Event()

    def stall(writer, step):
        original = writer.write_data

        def write_data(*args, **kwargs):
            release.wait(30)  # a stalled mount: the write does not return
            return original(*args, **kwargs)

        writer.write_data = write_data
        return writer

    ckpt = Checkpointer(tmp_path / "ckpt", async_save=True, storage_hook=stall, wait_timeout_s=0.5)
    ckpt.save(4, model, optimizer, {"step": 4})
    began = time.monotonic()
    try:
        with pytest.raises(CheckpointSaveError, match=r"step 4 .* did not finish within 0.5 s"):
            ckpt.wait()
        assert time.monotonic() - began < 5
    finally:
        release.set()


def test_retention_never_deletes_our_steps_for_a_step_copied_in(trained, tmp_path):
    """A complete step folder copied in from another run neither counts as newest nor is pruned."""
    import shutil

    model, optimizer = trained
    ckpt = Checkpointer(tmp_path / "a", keep=1)
    ckpt.save(1, model, optimizer, {"step": 1})
    foreign = Checkpointer(tmp_path / "other", keep=1).save(500, model, optimizer, {"step": 500})
    shutil.copytree(foreign.path, tmp_path / "a" / "step-000500")
    ours = ckpt.save(2, model, optimizer, {"step": 2})
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["step-000002", "step-000500"]  # step 1 pruned, ours kept, theirs untouched
    with pytest.warns(UserWarning, match="not in the ledger"):
        assert ckpt.latest() == ours.path
