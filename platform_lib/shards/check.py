"""The check a pipeline runs on a freshly built dataset: valid shards, and samples in every split."""

from __future__ import annotations

import os

from platform_lib.errors import UserError
from platform_lib.shards.errors import DatasetError
from platform_lib.shards.manifest import Manifest, load_manifest
from platform_lib.shards.validate import validate_dataset

__all__ = ["check_dataset", "describe_empty_split_fix", "explain_dataset_error"]


def explain_dataset_error(error: DatasetError, culprit: str) -> UserError:
    """Return the one-line `UserError` of a refused or failed build or an unreadable dataset.

    Bad frames become "N bad frame(s) (reason: count, ...; first: <detail>)" with the fix
    "... or rebuild with --quarantine" (the flag of `drivetrain data build` and of the workflow);
    other errors keep their first line, split at its last "; " into what and what to do.
    """
    lines = str(error).splitlines() or [type(error).__name__]
    report = getattr(error, "report", None)
    if report:
        counts = ", ".join(
            f"{reason}: {entry['count']}" for reason, entry in sorted(report.items())
        )
        total = sum(entry["count"] for entry in report.values())
        first = next(
            (line.split(":", 1)[1].strip() for line in lines if line.startswith("first error:")), ""
        )
        return UserError(
            f"{total} bad frame(s) ({counts}; first: {first})",
            culprit,
            "fix or remove those files, or rebuild with --quarantine to leave the frames out "
            "(they are listed in manifest.json 'quarantine')",
        )
    what, _, fix = lines[0].rpartition("; ")
    return UserError(what or lines[0], culprit, fix if what else "see `drivetrain data --help`")


def describe_empty_split_fix(method: str) -> str:
    """Return what to do about an empty split built with split `method`."""
    if method == "by_log":
        return (
            "split by frame range instead (split=by_frame_range, the last val_frames_per_log "
            "frames of every log go to val) or give more logs (val_fraction of them go to val)"
        )
    return "raise val_frames_per_log or give the logs more frames"


def check_dataset(
    dataset_dir: str | os.PathLike[str],
    *,
    splits: tuple[str, ...] = ("train", "val"),
    read_shards: bool = True,
) -> Manifest:
    """Validate a built dataset (`validate_dataset`) and check that every split in `splits` has samples.

    `read_shards=False` checks manifest and index only (see `validate_dataset`).

    Returns:
        The manifest.

    Raises:
        UserError: the dataset violates docs/format.md (the first problem and their count), or
            a split is empty (naming the split, the split method and the option that fixes it).
    """
    report = validate_dataset(os.fspath(dataset_dir), read_shards=read_shards)
    if not report.ok:
        raise UserError(
            f"dataset is invalid: {report.problems[0]} (+{len(report.problems) - 1} more problems)",
            os.fspath(dataset_dir),
            "rebuild it; `drivetrain data validate` lists every problem",
        )
    manifest = load_manifest(os.fspath(dataset_dir))
    counts, method = dict(manifest.splits.counts), manifest.splits.method
    empty = [s for s in splits if counts.get(s, 0) < 1]
    if empty:
        raise UserError(
            f"dataset has no samples in split {', '.join(map(repr, empty))} (split {method}, counts {counts})",
            os.fspath(dataset_dir),
            describe_empty_split_fix(method),
        )
    return manifest
