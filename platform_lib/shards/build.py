"""Build a dataset: frames -> checked -> encoded -> shards + index -> manifest (last) -> publish.

Everything is written into a staging folder beside the output (holding its builder's owner
lock) and published by one rename, so a crash leaves the output untouched and at most a
staging folder that the next build sweeps; of two builds racing into one output exactly one
publishes. An existing dataset is replaced only with `overwrite=True`; a non-empty folder that
is not a dataset is always refused. Details: docs/format.md, "Publishing".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tqdm import tqdm

from platform_lib.errors import UserError
from platform_lib.fsguard import hold_owner_lock, remove_if_orphaned
from platform_lib.shards.build_report import BadFrames
from platform_lib.shards.errors import BuildError
from platform_lib.shards.index import INDEX_NAME, count_classes, write_index
from platform_lib.shards.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    Manifest,
    builder_version,
    compute_dataset_hash,
    write_manifest,
)
from platform_lib.shards.prepare import PreparedFrame, prepare_frame, prepare_log
from platform_lib.shards.split import assign_splits
from platform_lib.shards.writer import ShardWriter, fsync_dir
from platform_lib.sources.catalog import iter_log_frames, list_log_urls
from platform_lib.sources.frame import Frame, FrameError
from platform_lib.sources.hashing import hash_logs

__all__ = [
    "BuildConfig",
    "assign_row_splits",
    "build_dataset",
    "check_output",
    "describe_config_error",
    "publish_staging",
    "stage_output",
    "write_dataset",
    "write_index_and_manifest",
]

#: Owner lock inside a staging folder (removed just before the folder is published).
_OWNER_LOCK = ".owner.lock"
#: How long a build waits for another build's renames in the same parent folder, in s.
_PUBLISH_WAIT_S = 60.0


class BuildConfig(BaseModel):
    """How raw frames become a dataset (see docs/format.md and platform_lib/shards/README.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shard_size_mb: float = Field(default=256.0, gt=0.0, allow_inf_nan=False)
    """target shard size, in MB (10**6 bytes). Tens to hundreds of MB amortise the per-request
    latency of object stores (~10-100 ms per GET) over a long sequential read and keep the file
    count low, yet stay small enough to cache on a node-local disk and to spread over many
    loader workers (one shard per worker at a time)"""
    split: Literal["by_log", "by_frame_range"] = "by_log"
    """train/val split method: whole logs, or the last frames of every log"""
    val_fraction: float = Field(default=0.2, ge=0.0, lt=1.0, allow_inf_nan=False)
    """by_log: fraction of logs that go to val (ignored when val_logs is given)"""
    val_logs: list[str] = Field(default_factory=list)
    """by_log: explicit val log ids (a list, not a tuple: Flyte types a task input's fields)"""
    val_frames_per_log: int = Field(default=2, ge=0)
    """by_frame_range: number of last frames of each log that go to val, in frames"""
    quarantine: bool = False
    """leave out bad frames and record them in manifest["quarantine"] instead of failing"""
    overwrite: bool = False
    """replace an existing dataset at the output folder (atomically, by rename)"""
    progress: bool | None = None
    """show tqdm bars; None = only when stderr is a terminal"""
    workers: int = Field(default=1, ge=1)
    """processes that read and encode raw logs (one log per task); output bytes do not
    depend on it"""
    key_prefixes: int = Field(default=1, ge=1, le=100)
    """object-store key prefixes the shards are spread over: 1 keeps `shards/shard-N.tar`;
    P > 1 puts shard i at `shards/pNN/shard-N.tar` with NN = i mod P, recorded as the
    manifest entry's `location` (S3 serves about 5,500 GET/s per prefix; `drivetrain data
    plan` says when one prefix is too few). Neither the sample bytes nor the dataset hash
    depend on it"""

    def recorded(self) -> dict[str, Any]:
        """Fields that shape the dataset bytes (recorded in the manifest; no paths, no flags)."""
        fields = self.model_dump(exclude={"overwrite", "progress", "workers", "key_prefixes"})
        fields["val_logs"] = sorted(self.val_logs)
        fields["pyarrow_version"] = pa.__version__
        return fields


#: pydantic's bound constraints and how a message states them.
_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def describe_config_error(error: ValidationError, prefix: str = "") -> str:
    """Return a config model's pydantic error as one line: `<field> must be <rule>, got <value>`.

    For `BuildConfig` and `SyntheticConfig`; bounds read as before they were pydantic models
    (`shard_size_mb must be > 0, got -1.0`); `prefix` goes before each field name.
    """
    problems = []
    for item in error.errors():
        field = prefix + (".".join(str(part) for part in item["loc"]) or "config")
        ctx = item.get("ctx", {})
        bound = next((f"{op} {ctx[key]:g}" for key, op in _BOUNDS if key in ctx), None)
        if bound is not None:
            rule = f"must be {bound}"
        elif item["type"] == "literal_error":
            rule = f"must be {ctx['expected']}"
        else:
            rule = item["msg"][:1].lower() + item["msg"][1:]
        value = item["input"]
        shown = repr(value) if isinstance(value, str) else value
        problems.append(f"{field} {rule}, got {shown}")
    return "; ".join(problems)


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse an `output` folder that may not be written (before any work, and again at publish).

    Raises:
        BuildError: `output` is a file, a dataset (without `overwrite`), or a non-empty folder
            that is not a dataset; the message names `output` and what to do.
    """
    if not output.exists():
        return
    if not output.is_dir():
        raise BuildError(f"output {output} exists and is not a folder; choose another --output")
    if (output / MANIFEST_NAME).exists():
        if not overwrite:
            raise BuildError(
                f"output {output} already holds a dataset; pass --overwrite to "
                "replace it atomically, or choose another --output"
            )
    elif any(output.iterdir()):
        raise BuildError(
            f"output {output} is a non-empty folder that is not a Drivetrain "
            "dataset (no manifest.json); empty it or choose another --output"
        )


def sweep_staging(output: Path) -> int:
    """Remove the staging folders of `output` whose builder is gone; return how many.

    A staging folder is removed only when nobody holds its owner lock (its builder died: the
    kernel dropped the lock), whatever PID namespace the builder ran in. Staging folders
    without a lock file (a builder between its last write and its rename) are left alone.
    """
    removed = 0
    for staging in output.parent.glob(f".{output.name}.staging-*"):
        if staging.is_dir() and not staging.is_symlink():
            removed += remove_if_orphaned(staging / _OWNER_LOCK, staging)
    return removed


@contextlib.contextmanager
def stage_output(output: Path) -> Iterator[Path]:
    """Yield a new staging folder beside `output`, owned by this process until the block ends.

    Orphaned staging folders of `output` are swept first (`sweep_staging`). The folder holds
    this process's owner lock; on leaving the block the folder (if not published by
    `publish_staging`) is removed and the lock released.

    Raises:
        UserError: this user may not create folders beside `output` (names `output`).
    """
    staging = output.parent / f".{output.name}.staging-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        sweep_staging(output)
        staging.mkdir()
    except PermissionError:  # name the output, not the hidden staging folder
        raise UserError(
            f"permission denied: user {os.getuid()} may not create the output in its parent "
            f"folder {output.parent}",
            str(output),
            "give this user write access to that folder or choose another output (--output)",
        ) from None
    lock_fd = hold_owner_lock(staging / _OWNER_LOCK)
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(lock_fd)


@contextlib.contextmanager
def _parent_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `folder` itself (no lock file left behind), with a deadline."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + _PUBLISH_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BuildError(
                        f"another build kept {folder} locked for {_PUBLISH_WAIT_S:.0f} s while "
                        "publishing; retry when it has finished"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def publish_staging(staging: Path, output: Path, overwrite: bool) -> None:
    """Rename the finished `staging` folder (from `stage_output`) to `output`, atomically.

    Builds publishing into one parent folder take turns (a lock on the parent), and the output
    is checked again under that lock: when another build published there meanwhile, this one
    is refused (unless `overwrite`). An empty `output` folder is replaced by the rename itself.

    Raises:
        BuildError: the output may no longer be written (see `check_output`), naming it.
    """
    old = None
    with _parent_lock(output.parent):
        if not overwrite and (output / MANIFEST_NAME).exists():
            raise BuildError(
                f"another build published a dataset at output {output} while this one ran; "
                "keep it, pass --overwrite to replace it, or choose another --output"
            )
        check_output(output, overwrite)
        if (output / MANIFEST_NAME).exists():
            old = output.parent / f".{output.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
            os.replace(output, old)
        (staging / _OWNER_LOCK).unlink()  # the lock fd stays held until `stage_output` ends
        try:
            os.rename(staging, output)  # replaces an empty folder atomically
        except OSError as error:
            if old is not None:  # put the previous dataset back
                os.replace(old, output)
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise BuildError(
                    f"output {output} was filled by someone else while this build ran; "
                    "empty it or choose another --output"
                ) from None
            raise
        fsync_dir(output.parent)
    if old is not None:
        shutil.rmtree(old)


def assign_row_splits(
    rows: list[dict[str, Any]], config: BuildConfig, *, fix: str, over: str = ""
) -> dict[str, Any]:
    """Set `row["split"]` of every index row by `config`'s split settings; return the record.

    Args:
        rows: index rows with "log_id" and "frame_index", in index order.
        config: the split settings (`split`, `val_fraction`, `val_logs`, `val_frames_per_log`).
        fix: what to do, ending the error message.
        over: what the splits are assigned over, for the message (e.g. " over the parts").

    Raises:
        BuildError: the settings cannot be applied to these rows.
    """
    try:
        splits, record = assign_splits(
            [(r["log_id"], r["frame_index"]) for r in rows],
            method=config.split,
            val_fraction=config.val_fraction,
            val_logs=tuple(config.val_logs),
            val_frames_per_log=config.val_frames_per_log,
        )
    except ValueError as exc:
        raise BuildError(f"cannot assign splits{over}: {exc}; {fix}") from exc
    for row, split in zip(rows, splits, strict=True):
        row["split"] = split
    return record


def write_dataset(
    frames: Iterable[Frame | PreparedFrame | FrameError],
    output_dir: str | Path,
    config: BuildConfig,
    *,
    source: str,
    source_logs: list[dict[str, Any]],
    input_root: str | Path | None = None,
) -> Manifest:
    """Write `frames` as a published dataset at `output_dir`; return the manifest.

    Args:
        frames: frames sorted by (log_id, frame_index) (already encoded ones, `PreparedFrame`,
            pass as they are), or FrameError for unreadable frames.
        output_dir: dataset folder to publish (atomically).
        config: build settings.
        source: source name recorded in the manifest ("pandaset", "synthetic", ...).
        source_logs: [{"log_id", "content_hash"}] of the raw logs; num_frames is filled in.
        input_root: raw input folder; file paths in quarantine entries are made relative to it.

    Raises:
        BuildError: bad frames without `config.quarantine` (per-reason counts and example
            files in the message and `.report`), no samples, unsorted/duplicate frames, or an
            output folder that may not be written.
    """
    output = Path(output_dir).absolute()
    check_output(output, config.overwrite)
    with stage_output(output) as staging:
        manifest = _write_staging(
            (prepare_frame(item) for item in frames),
            staging,
            config,
            source=source,
            source_logs=source_logs,
            input_root=input_root,
        )
        publish_staging(staging, output, config.overwrite)
    return manifest


def _write_staging(
    items: Iterable[PreparedFrame | FrameError],
    staging: Path,
    config: BuildConfig,
    *,
    source: str,
    source_logs: list[dict[str, Any]],
    input_root: str | Path | None,
) -> Manifest:
    progress = sys.stderr.isatty() if config.progress is None else config.progress
    bad = BadFrames(input_root=input_root)
    rows: list[dict[str, Any]] = []
    cameras: tuple[str, ...] | None = None
    has_seg = has_radar = False
    last: tuple[str, int] | None = None
    frames_per_log: dict[str, int] = {}
    target = int(config.shard_size_mb * 1_000_000)
    bar = tqdm(items, disable=not progress, unit="frame", desc="build")
    shown_log: str | None = None
    with bar, ShardWriter(staging, target_bytes=target) as writer:
        for item in bar:
            if progress and item.log_id != shown_log:
                shown_log = item.log_id
                bar.set_postfix_str(shown_log or "", refresh=False)  # the log being written
            if isinstance(item, FrameError):
                bad.add(item)
                continue
            if cameras is not None and item.cameras != cameras:
                bad.add(
                    FrameError(
                        f"frame {item.key}: cameras {list(item.cameras)} differ from the dataset's "
                        f"{list(cameras)}; every frame needs the same camera rig",
                        reason="count_mismatch",
                        log_id=item.log_id,
                        frame_index=item.frame_index,
                    )
                )
                continue
            order = (item.log_id, item.frame_index)
            if last is not None and order <= last:
                raise BuildError(
                    f"frame {item.key} arrives after {last}: sources must yield "
                    "frames sorted by (log_id, frame_index) without duplicates"
                )
            last, cameras = order, item.cameras
            has_seg |= item.has_seg
            has_radar |= item.has_radar
            location = writer.add(item.key, item.members)
            rows.append({**item.summary, **location.as_row()})
            frames_per_log[item.log_id] = frames_per_log.get(item.log_id, 0) + 1
        shards = writer.close()
    if bad.count and not config.quarantine:
        raise BuildError(bad.describe(), report=bad.report())
    if not rows:
        raise BuildError(
            f"no usable frames ({bad.count} bad); nothing to build"
            + (f"\n{bad.describe()}" if bad.count else ""),
            report=bad.report(),
        )
    # e.g. --val-logs naming a log without usable frames
    split_record = assign_row_splits(rows, config, fix="fix --val-logs/--split")
    shard_entries = [asdict(s) for s in shards]
    if config.key_prefixes > 1:
        _spread_over_prefixes(staging, shard_entries, config.key_prefixes)
    quarantined_per_log = bad.count_per_log()
    logs = [
        {
            **entry,
            "num_frames": frames_per_log.get(entry["log_id"], 0),
            "num_quarantined": quarantined_per_log.get(entry["log_id"], 0),
        }
        for entry in sorted(source_logs, key=lambda e: e["log_id"])
    ]
    return write_index_and_manifest(
        staging,
        rows,
        shard_entries,
        {
            "source": source,
            "sensors": {
                "cameras": list(cameras or ()),
                "lidar": True,
                "lidar_seg": has_seg,
                "radar": has_radar,
            },
            "source_logs": logs,
            "splits": split_record,
            "class_counts": count_classes(rows),
            "quarantine": bad.entries() if config.quarantine else [],
            "build_config": config.recorded(),
        },
    )


def write_index_and_manifest(
    staging: Path, rows: list[dict[str, Any]], shards: list[dict[str, Any]], fields: dict[str, Any]
) -> Manifest:
    """Write the index of `rows` and then the manifest into `staging`; return the manifest.

    Args:
        staging: the folder being built (`stage_output`), its shards already closed.
        rows: index rows, in index order.
        shards: manifest shard entries (path, sha256, bytes, num_samples[, location]).
        fields: the other manifest fields (source, sensors, source_logs, splits, ...); the
            versions, dataset hash, counts, shards and index entry are filled in here.
    """
    index_sha, index_bytes = write_index(rows, staging / INDEX_NAME)
    manifest = Manifest.from_dict(
        {
            **fields,
            "format_version": FORMAT_VERSION,
            "builder_version": builder_version(),
            "dataset_hash": compute_dataset_hash(index_sha, shards),
            "num_samples": len(rows),
            "num_shards": len(shards),
            "total_bytes": index_bytes + sum(s["bytes"] for s in shards),
            "shards": shards,
            "index": {"path": INDEX_NAME, "sha256": index_sha, "bytes": index_bytes},
        },
        where=f"{staging}/{MANIFEST_NAME}",
    )
    fsync_dir(staging / "shards" if (staging / "shards").is_dir() else staging)
    write_manifest(staging, manifest)
    return manifest


def _spread_over_prefixes(staging: Path, entries: list[dict[str, Any]], prefixes: int) -> None:
    """Move shard i to `shards/pNN/` (NN = i mod `prefixes`) and record that as its `location`.

    The entry's `path` (the shard's name: dataset hash, node-cache file) stays as it is.
    """
    for i, entry in enumerate(entries):
        location = f"shards/p{i % prefixes:02d}/{entry['path'].removeprefix('shards/')}"
        (staging / location).parent.mkdir(exist_ok=True)
        os.replace(staging / entry["path"], staging / location)
        entry["location"] = location
    for folder in {str(Path(e["location"]).parent) for e in entries}:
        fsync_dir(staging / folder)


def build_dataset(
    source: str, input_path: str | Path, output_dir: str | Path, config: BuildConfig
) -> Manifest:
    """Build a dataset from raw logs of `source` ("pandaset" | "synthetic") at `input_path`.

    With `config.workers > 1`, logs are read and encoded in that many processes (one log per
    task); samples are still written in (log, frame) order, so the bytes are the same.

    Returns:
        The manifest (also written to `<output_dir>/manifest.json`).

    Raises:
        BuildError: see `write_dataset`.
        UserError: unknown source, or `input_path` holds no logs of `source`.
        RawFileChangedError: a raw file's bytes as read differ from those hashed for the
            manifest (it changed during the build); nothing is published.
    """
    log_dirs = [Path(p) for p in list_log_urls(source, os.fspath(input_path))]
    unknown = sorted(set(config.val_logs) - {d.name for d in log_dirs})
    if unknown:  # fail before reading any frame, not after the whole build
        raise BuildError(
            f"val_logs {unknown} are not logs of {input_path} (logs: "
            f"{[d.name for d in log_dirs][:20]}); fix --val-logs"
        )
    show = sys.stderr.isatty() if config.progress is None else config.progress
    # hashing reads every raw byte before the first frame is built: a bar of its own
    listings, source_logs = [], []  # read through the listings: every byte read is checked
    for log_dir in tqdm(log_dirs, disable=not show, unit="log", desc="hash raw logs"):
        [files], [entry] = hash_logs([log_dir])
        listings.append(files)
        source_logs.append(entry)
    with contextlib.ExitStack() as stack:
        items: Iterable[Frame | PreparedFrame | FrameError]
        if config.workers == 1:
            items = (
                item
                for files in listings
                for item in iter_log_frames(source, files.root, files=files)
            )
        else:
            context = multiprocessing.get_context("spawn")
            pool = stack.enter_context(context.Pool(min(config.workers, len(log_dirs))))
            per_log = pool.imap(prepare_log, [(source, files) for files in listings])
            items = (item for log_items in per_log for item in log_items)
        return write_dataset(
            items, output_dir, config, source=source, source_logs=source_logs, input_root=input_path
        )
