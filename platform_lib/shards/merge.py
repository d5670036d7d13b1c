"""Fanned-out dataset build: one *part* per raw log, then a merge that writes no shard bytes.

`build_part` builds a complete dataset from ONE raw log into the content-addressed part store
(`part_key`: the log's content hash and every setting that shapes the part's bytes), so a log
built before is found, not rebuilt, and parts build in any order on any number of processes
or nodes. `merge_parts` reads only the parts' manifests and indexes and writes a new index +
manifest whose shard entries carry a `location`; splits are assigned over all logs at merge
time. The merged format and its hash: docs/format.md, "Merged datasets".
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform_lib.errors import UserError
from platform_lib.fsguard import iter_chunks, open_regular
from platform_lib.shards.build import (
    BuildConfig,
    assign_row_splits,
    check_output,
    publish_staging,
    stage_output,
    write_dataset,
    write_index_and_manifest,
)
from platform_lib.shards.errors import BuildError, DatasetError
from platform_lib.shards.index import INDEX_NAME, read_index
from platform_lib.shards.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    Manifest,
    builder_version,
    dataset_file,
    load_manifest,
)
from platform_lib.sources.catalog import iter_log_frames
from platform_lib.sources.frame import CLASS_GROUPS, Frame, FrameError
from platform_lib.sources.hashing import hash_logs
from platform_lib.sources.raw_files import RawFileChangedError
from platform_lib.storage import explain_location_error, resolve_fs

__all__ = [
    "PartResult",
    "build_part",
    "merge_parts",
    "part_key",
    "part_problem",
    "resolve_part_store",
]

#: Settings of `BuildConfig` that do not shape a part's bytes (splits are assigned at merge).
_MERGE_ONLY_FIELDS = (
    "split",
    "val_fraction",
    "val_logs",
    "val_frames_per_log",
    "overwrite",
    "progress",
    "workers",
)


@dataclass(kw_only=True, frozen=True)
class PartResult:
    """One published part."""

    location: str
    """folder or URL of the part (a complete one-log dataset)"""
    log_id: str
    """the raw log's id"""
    log_hash: str
    """the raw log's content hash (`platform_lib.sources.hashing.hash_raw_log`)"""
    built: bool
    """False when the part was already in the store and whole (read to check, nothing written)"""


def resolve_part_store(store: str | None = None) -> str:
    """Return the part store: `store`, `$DRIVETRAIN_PART_STORE`, or `$DRIVETRAIN_HOME/parts`.

    A cluster points it at object storage (e.g. `s3://bucket/drivetrain/parts`) so that every
    node sees the parts every other node built.

    Raises:
        UserError: the store URL carries credentials (`user:password@`); the line names the
            store with the password masked.
    """
    given = store or os.environ.get("DRIVETRAIN_PART_STORE")
    if given:
        url = urllib.parse.urlsplit(given)
        if "://" in given and "@" in url.netloc:
            host = url.netloc.rsplit("@", 1)[1]
            raise UserError(
                "the part store URL carries credentials",
                f"part store {urllib.parse.urlunsplit(url._replace(netloc=f'***@{host}'))}",
                "remove them from the URL (DRIVETRAIN_PART_STORE) and give them through the "
                "environment or a profile (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)",
            )
        return given.rstrip("/")
    home = Path(os.environ.get("DRIVETRAIN_HOME") or "~/.drivetrain").expanduser().resolve()
    return str(home / "parts")


def _part_config(config: BuildConfig) -> BuildConfig:
    """The config a part is built with: the byte-shaping fields of `config`, everything train."""
    return config.model_copy(
        update={
            "split": "by_log",
            "val_fraction": 0.0,
            "val_logs": [],
            "overwrite": False,
            "progress": False,
            "workers": 1,
        }
    )


def part_key(source: str, log_hash: str, config: BuildConfig) -> str:
    """Return the content address of the part of one log (sha256 hex).

    It hashes the source name, the raw log's content hash, the part-shaping build settings
    (`BuildConfig.recorded()` without the split fields, which includes the pyarrow version)
    and the builder and format versions: change any of them and the log is built again.
    """
    recorded = {
        k: v for k, v in _part_config(config).recorded().items() if k not in _MERGE_ONLY_FIELDS
    }
    text = json.dumps(
        {
            "source": source,
            "log_hash": log_hash,
            "config": recorded,
            "builder": builder_version(),
            "format": FORMAT_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def _naming_store(store: str) -> Iterator[None]:
    """Raise a storage error of the block as the one-line error naming the part store.

    Without it the command would name its main input (the raw-log folder) as the culprit of
    an unreachable or misnamed store. Errors that are no storage errors pass unchanged.
    """
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        user = explain_location_error(exc, f"part store {store}")
        if user is None:
            raise
        raise user from exc


def _then(
    frames: Iterator[Frame | FrameError], check: Callable[[], None] | None
) -> Iterator[Frame | FrameError]:
    """Yield `frames`, then call `check` (while the part is still staged, before publishing)."""
    yield from frames
    if check is not None:
        check()


def build_part(
    source: str,
    log_dir: str | Path,
    config: BuildConfig,
    *,
    store: str | None = None,
    log_hash: str | None = None,
    check_source: Callable[[], None] | None = None,
) -> PartResult:
    """Build (or find) the part of the raw log at `log_dir` in the part store.

    The log is hashed (`sources.hashing.hash_logs`) and read through the listing it hashed, so
    every byte read is checked against that hash: the part key always names the bytes the part
    was built from, and a log that changes while it is read publishes nothing.

    Args:
        source: raw-log format ("synthetic" | "pandaset").
        log_dir: local folder of ONE raw log (its name is the log id).
        config: build settings; only the byte-shaping ones matter (see `part_key`).
        store: part store folder or URL (`resolve_part_store`).
        log_hash: the log's hash when it was listed (`hash_log_location`); without
            `check_source` it must still be the hash of `log_dir`'s bytes. None: hash it now.
        check_source: for a log downloaded from object storage, where `log_hash` hashes the
            objects' versions, not the local copy: called after the last frame is read and
            before the part is published, to raise if the remote log changed
            (`sources.hashing.check_raw_logs_unchanged`).

    Returns:
        Where the part is and whether it was built now. A part on object storage is uploaded
        manifest last, so one without manifest.json is incomplete and is rebuilt.

    Raises:
        BuildError: the log has bad frames (without `config.quarantine`) or no usable frame;
            the message names the log and the per-reason counts.
        RawFileChangedError: the log's bytes are not those `log_hash` names, or a file changed
            while it was read (naming it); nothing is published.
    """
    log_dir = Path(log_dir)
    files = None
    if log_hash is None:
        [files], [entry] = hash_logs([log_dir])
        log_hash = entry["content_hash"]
    store = resolve_part_store(store)
    location = f"{store}/{source}/{part_key(source, log_hash, config)}"
    with _naming_store(store):
        fs, path, is_local = resolve_fs(location)
        stored = fs.exists(f"{path}/{MANIFEST_NAME}")
        problem = part_problem(location) if stored else None
    if stored:
        if problem is None:
            return PartResult(
                location=location, log_id=log_dir.name, log_hash=log_hash, built=False
            )
        print(
            f"warning: stored part of log {log_dir.name} is not whole ({location}: {problem}); "
            "rebuilding it",
            file=sys.stderr,
        )
        with _naming_store(store):
            _discard_part(fs, path, is_local)
    if files is None:
        [files], [entry] = hash_logs([log_dir])
        if check_source is None and entry["content_hash"] != log_hash:
            raise RawFileChangedError(
                f"raw log changed since it was listed (content hash {log_hash[:12]} listed, "
                f"{entry['content_hash'][:12]} now)",
                str(log_dir),
                "stop writing to the raw-log folder and re-run the build",
            )
    frames = _then(iter_log_frames(source, log_dir, files=files), check_source)  # reads checked
    logs = [{"log_id": log_dir.name, "content_hash": log_hash}]
    with contextlib.ExitStack() as stack:
        local = (
            Path(path)
            if is_local
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="drivetrain-part-")))
            / "part"
        )
        try:
            write_dataset(
                frames,
                local,
                _part_config(config),
                source=source,
                source_logs=logs,
                input_root=log_dir.parent,
            )
        except BuildError:
            if not (is_local and fs.exists(f"{path}/{MANIFEST_NAME}")):
                raise  # else a concurrent builder published the same part first: same bytes
        if not is_local:
            with _naming_store(store):
                fs.put(str(local / "shards") + "/", f"{path}/shards/", recursive=True)
                fs.put_file(str(local / INDEX_NAME), f"{path}/{INDEX_NAME}")
                fs.put_file(str(local / MANIFEST_NAME), f"{path}/{MANIFEST_NAME}")  # last
    return PartResult(location=location, log_id=log_dir.name, log_hash=log_hash, built=True)


def part_problem(location: str) -> str | None:
    """Return what is wrong with the stored part at `location`, or None when it is whole.

    A part is whole when its manifest loads, its index and every shard it lists are regular
    files inside the part folder (no link out of it) and have the size and sha256 the part's
    own manifest records. Every shard byte is read (a flipped byte is found).
    """
    fs, path, is_local = resolve_fs(location)
    try:
        manifest = load_manifest(location)
        files: list[tuple[str, int, str]] = [
            (manifest.index.path, manifest.index.bytes, manifest.index.sha256)
        ]
        files += [(s.path, s.bytes, s.sha256) for s in manifest.shards]
        for name, size, sha256 in files:
            file = dataset_file(path, name, is_local=is_local)
            digest, got = hashlib.sha256(), 0
            if is_local:
                fd = open_regular(file, root=path)
                try:
                    for chunk in iter_chunks(fd, file):
                        digest.update(chunk)
                        got += len(chunk)
                finally:
                    os.close(fd)
            else:
                with fs.open(file, "rb") as stream:
                    while chunk := stream.read(1 << 20):
                        digest.update(chunk)
                        got += len(chunk)
            if got != size or digest.hexdigest() != sha256:
                return (
                    f"{name} is {got} bytes of sha256 {digest.hexdigest()[:12]}, "
                    f"its manifest says {size} bytes of {sha256[:12]}"
                )
    except (UserError, DatasetError, FileNotFoundError) as exc:
        return " ".join(str(exc).split())
    return None


def _discard_part(fs: Any, path: str, is_local: bool) -> None:
    """Remove the stored part at `path` (a local one is first moved aside, atomically)."""
    if not is_local:
        fs.rm(path, recursive=True)
        return
    aside = f"{path}.discarded-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # a concurrent builder discarded it first
    shutil.rmtree(aside)


def _relative_location(part: str, name: str, output: Path) -> str:
    """Return where the part file `name` is, for a merged manifest's shard `location`.

    Relative to the dataset root when the part lies inside it, else the part folder's absolute
    path joined with `name`: only the folder is resolved, never the file, so a link in the part
    is not followed into the manifest.
    """
    if "://" in part:
        return f"{part}/{name}"
    folder = Path(part).resolve()
    try:
        return (folder.relative_to(output) / name).as_posix()
    except ValueError:
        return str(folder / name)


def _read_part(location: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    manifest = load_manifest(location).to_dict()  # validated; merged below as plain JSON
    if len(manifest.get("source_logs", [])) != 1:
        raise BuildError(
            f"part {location} holds {len(manifest.get('source_logs', []))} logs, "
            "a part holds exactly one; rebuild it with build_part"
        )
    fs, path, is_local = resolve_fs(location)
    for entry in manifest["shards"]:  # a link out of the part would be recorded as the part's
        dataset_file(path, entry.get("location") or entry["path"], is_local=is_local)
    data = fs.cat_file(f"{path}/{manifest['index']['path']}")
    if hashlib.sha256(data).hexdigest() != manifest["index"]["sha256"]:
        raise BuildError(
            f"part {location}/{INDEX_NAME} differs from its manifest's sha256 "
            "(corrupt or replaced); delete the part folder and rebuild it"
        )
    return manifest, read_index(io.BytesIO(data), where=f"{location}/{INDEX_NAME}").to_pylist()


def merge_parts(
    parts: Sequence[str], output_dir: str | Path, config: BuildConfig, *, source: str
) -> Manifest:
    """Publish a dataset at `output_dir` over the shards of `parts` without copying them.

    Args:
        parts: part folders or URLs (`build_part`), in any order.
        output_dir: local folder receiving index.parquet and manifest.json only.
        config: split settings applied over all logs; `overwrite` as in `build_dataset`.
        source: the raw-log format every part must have been built from.

    Returns:
        The manifest; shard entries carry `location` (see module docstring).

    Raises:
        BuildError: no parts, two parts of one log id, a part of another source or shard
            size, cameras that differ between logs (naming both logs), a corrupt part index,
            or split settings that cannot be applied.
    """
    if not parts:
        raise BuildError("no parts to merge: the raw-log location holds no logs")
    output = Path(output_dir).absolute()
    check_output(output, config.overwrite)
    loaded = sorted(
        (_read_part(p) + (p,) for p in parts), key=lambda t: t[0]["source_logs"][0]["log_id"]
    )
    seen: dict[str, str] = {}
    for manifest, _, where in loaded:
        log_id = manifest["source_logs"][0]["log_id"]
        if log_id in seen:
            raise BuildError(
                f"parts {seen[log_id]} and {where} both hold log {log_id!r}; pass each raw log once"
            )
        seen[log_id] = where
        if manifest["source"] != source:
            raise BuildError(
                f"part {where} was built from source {manifest['source']!r}, "
                f"not {source!r}; rebuild it"
            )
        if manifest["build_config"]["shard_size_mb"] != config.shard_size_mb:
            raise BuildError(
                f"part {where} has shard_size_mb "
                f"{manifest['build_config']['shard_size_mb']}, the merge "
                f"{config.shard_size_mb}; rebuild the part"
            )
    first = loaded[0][0]
    rows: list[dict[str, Any]] = []
    shards: list[dict[str, Any]] = []
    for manifest, part_rows, where in loaded:
        if manifest["sensors"]["cameras"] != first["sensors"]["cameras"]:
            raise BuildError(
                f"log {manifest['source_logs'][0]['log_id']} has cameras "
                f"{manifest['sensors']['cameras']}, log {first['source_logs'][0]['log_id']} "
                f"has {first['sensors']['cameras']}; every log needs the same camera rig"
            )
        base = len(shards)
        for entry in manifest["shards"]:
            shards.append(
                {
                    **entry,
                    "path": f"shards/shard-{len(shards):06d}.tar",
                    "location": _relative_location(
                        where, entry.get("location") or entry["path"], output
                    ),
                }
            )
        for row in part_rows:
            rows.append(
                {
                    **row,
                    "shard_id": base + row["shard_id"],
                    "shard": shards[base + row["shard_id"]]["path"],
                }
            )
    split_record = assign_row_splits(rows, config, fix="fix the split", over=" over the parts")
    with stage_output(output) as staging:
        merged = write_index_and_manifest(
            staging,
            rows,
            shards,
            {
                "source": source,
                "sensors": {
                    "cameras": first["sensors"]["cameras"],
                    "lidar": True,
                    "lidar_seg": any(m["sensors"]["lidar_seg"] for m, _, _ in loaded),
                    "radar": any(m["sensors"]["radar"] for m, _, _ in loaded),
                },
                "source_logs": [m["source_logs"][0] for m, _, _ in loaded],
                "splits": split_record,
                "class_counts": {
                    g: sum(m["class_counts"][g] for m, _, _ in loaded)
                    for g in (*CLASS_GROUPS, "other")
                },
                "quarantine": sorted(
                    (q for m, _, _ in loaded for q in m["quarantine"]),
                    key=lambda q: (q["key"], q["reason"]),
                ),
                "build_config": {**config.recorded(), "parts": "per-log"},
            },
        )
        publish_staging(staging, output, config.overwrite)
    return merged
