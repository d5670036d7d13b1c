"""`drivetrain data {build,inspect,validate,view}`: the dataset command group of the CLI."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_lib.errors import UserError, format_user_error
from platform_lib.shards.errors import BuildError
from platform_lib.shards.split import SPLIT_METHODS
from platform_lib.sources.catalog import DEFAULT_SPLITS, SOURCE_NAMES, check_raw_folder

if TYPE_CHECKING:  # the manifest module pulls pydantic; keep the CLI import light
    from pydantic import ValidationError

    from platform_lib.shards.manifest import Manifest

# Heavy modules (pyarrow, pandera, numpy) are imported inside the commands so that
# `drivetrain --help` and other command groups start fast.

__all__ = [
    "add_data_commands",
    "check_dataset_folder",
    "ensure_synthetic_logs",
    "parse_camera_size",
    "summarize_manifest",
]


def ensure_synthetic_logs(
    input_path: Path, *, num_logs: int | None, frames_per_log: int | None, seed: int | None
) -> str:
    """Generate synthetic raw logs into `input_path` unless it already holds some.

    Raises:
        BuildError: `input_path` is a file, or a non-empty folder without synthetic logs.

    Returns:
        A one-line note of what was done (for the terminal).
    """
    from platform_lib.sources.synthetic import (
        SyntheticConfig,
        list_synthetic_logs,
        write_synthetic_logs,
    )

    try:
        existing = list_synthetic_logs(input_path)
    except (FileNotFoundError, NotADirectoryError):
        existing = []
    if existing:
        return (
            f"using {len(existing)} existing synthetic logs in {input_path} "
            "(--num-logs/--frames-per-log/--seed only apply when it holds none)"
        )
    if input_path.exists() and (
        not input_path.is_dir() or any(not p.name.startswith(".") for p in input_path.iterdir())
    ):
        # never write generated logs into someone's (raw-data) folder
        raise BuildError(
            f"--input {input_path} holds no synthetic logs but is not an empty "
            "folder; pass a new or empty folder to generate synthetic logs into"
        )
    given: dict[str, Any] = {"num_logs": num_logs, "frames_per_log": frames_per_log, "seed": seed}
    config = SyntheticConfig(**{name: value for name, value in given.items() if value is not None})
    write_synthetic_logs(config, input_path)
    return (
        f"generated {config.num_logs} synthetic raw logs x {config.frames_per_log} frames "
        f"(seed {config.seed}) into {input_path}"
    )


def summarize_manifest(manifest: Manifest) -> dict[str, Any]:
    """Return the `data inspect` summary of a manifest (a training view's: with its lineage)."""
    view = {"view": manifest.view.model_dump(mode="json")} if manifest.view else {}
    return {
        "dataset_hash": manifest.dataset_hash,
        "source": manifest.source,
        "num_samples": manifest.num_samples,
        "num_shards": manifest.num_shards,
        "total_bytes": manifest.total_bytes,
        "sensors": manifest.sensors.model_dump(mode="json"),
        "class_counts": dict(manifest.class_counts),
        "splits": dict(manifest.splits.counts),
        "num_logs": len(manifest.source_logs),
        "num_quarantined": len(manifest.quarantine),
        "builder_version": manifest.builder_version,
        # the settings that shaped the bytes (so the hash): a pipeline build is "per-log" parts
        "build_config": {"parts": "packed", **manifest.build_config},
        **view,
    }


def _split_options(args: argparse.Namespace) -> dict[str, Any]:
    """The split fields of BuildConfig: the source's default split unless --split is given."""
    options = dict(DEFAULT_SPLITS[args.source]) if args.split is None else {"split": args.split}
    given = {"val_fraction": args.val_fraction, "val_frames_per_log": args.val_frames_per_log}
    return options | {k: v for k, v in given.items() if v is not None}


def _usage_error(error: UserError) -> int:
    """Print a bad argument's one-line error; return argparse's exit status for it, 2."""
    print(format_user_error(error), file=sys.stderr)
    return 2


def _config_error(error: ValidationError, command: str) -> int:
    """`_usage_error` for a config model built from the flags of `drivetrain data <command>`."""
    from platform_lib.shards.build import describe_config_error

    help_line = f"see `drivetrain data {command} --help`"
    return _usage_error(UserError(describe_config_error(error), f"data {command}", help_line))


def _run_build(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from platform_lib.shards.build import BuildConfig, build_dataset, describe_config_error

    try:
        config = BuildConfig(
            shard_size_mb=args.shard_size_mb,
            **_split_options(args),
            val_logs=[v for v in (args.val_logs or "").split(",") if v],
            quarantine=args.quarantine,
            overwrite=args.overwrite,
            workers=args.workers,
            key_prefixes=args.key_prefixes,
        )
    except ValidationError as exc:
        return _config_error(exc, "build")
    input_path = Path(args.input)
    if args.source != "synthetic" or input_path.exists() or input_path.is_symlink():
        check_raw_folder(input_path, args.source)  # synthetic: a new folder is generated
    if args.source == "synthetic":
        try:
            note = ensure_synthetic_logs(
                input_path,
                num_logs=args.num_logs,
                frames_per_log=args.frames_per_log,
                seed=args.seed,
            )
        except ValidationError as exc:  # e.g. --num-logs 0
            what = describe_config_error(exc, "SyntheticConfig.")
            return _usage_error(
                UserError(what, "--num-logs/--frames-per-log/--seed", "give positive sizes")
            )
        print(note, file=sys.stderr)
    if args.parts == "per-log":  # the pipeline's build: one part per log, then a merge
        from platform_lib.shards.merge import build_part, merge_parts
        from platform_lib.sources.catalog import list_log_urls

        logs = list_log_urls(args.source, str(input_path))
        parts = [build_part(args.source, log, config).location for log in logs]
        manifest = merge_parts(parts, args.output, config, source=args.source)
    else:
        manifest = build_dataset(args.source, input_path, args.output, config)
    split_counts = dict(manifest.splits.counts)
    for split in ("train", "val"):
        if not split_counts.get(split):
            from platform_lib.shards.check import describe_empty_split_fix

            print(
                f"warning: split {split!r} is empty (split {config.split}, counts {split_counts}) "
                f"(--split): {describe_empty_split_fix(config.split)}",
                file=sys.stderr,
            )
    print(
        f"built {args.output}: {manifest.num_samples} samples in {manifest.num_shards} "
        f"shards, {manifest.total_bytes / 1e6:.1f} MB, dataset_hash "
        f"{manifest.dataset_hash}"
    )
    if manifest.quarantine:
        counts = Counter(entry["reason"] for entry in manifest.quarantine)
        detail = ", ".join(f"{r}: {n}" for r, n in sorted(counts.items()))
        print(
            f"quarantined {len(manifest.quarantine)} frame(s) ({detail}); "
            "see manifest.json 'quarantine'"
        )
    return 0


def check_dataset_folder(dataset: str) -> None:
    """Fail in one line when a local dataset is no folder (before "no manifest.json").

    Raises:
        UserError: `dataset` is a local path that does not exist, or is not a folder (a file,
            a FIFO, a device: never opened).
    """
    if "://" in dataset:
        return
    path = Path(dataset)
    if not path.exists():
        raise UserError(
            "dataset folder does not exist",
            dataset,
            "pass the --output folder of `drivetrain data build` (or a dataset URL)",
        )
    if not path.is_dir():
        raise UserError(
            "not a dataset folder (a dataset is the folder `drivetrain data build` wrote)",
            dataset,
            "pass the --output folder of `drivetrain data build` (or a dataset URL)",
        )


def _run_inspect(args: argparse.Namespace) -> int:
    from platform_lib.shards.manifest import load_manifest

    check_dataset_folder(args.dataset)
    summary = summarize_manifest(load_manifest(args.dataset))
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    width = max(len(k) for k in summary)
    for name, value in summary.items():
        print(f"{name:<{width}}  {json.dumps(value, sort_keys=True)}")
    return 0


def _run_validate(args: argparse.Namespace) -> int:
    from platform_lib.shards.validate import validate_dataset

    check_dataset_folder(args.dataset)
    report = validate_dataset(args.dataset)
    print(report.describe(), file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else 1


def parse_camera_size(text: str) -> tuple[int, int]:
    """Return (width, height) in pixels of a `--camera-size WxH` value such as "704x256".

    Raises:
        UserError: not two positive integers joined by "x" (culprit `--camera-size`).
    """
    match = re.fullmatch(r"\s*([0-9]{1,6})\s*[xX]\s*([0-9]{1,6})\s*", text)
    if match is None:
        raise UserError(
            f"camera size {text!r} is not WIDTHxHEIGHT in pixels",
            "--camera-size",
            "give two positive integers joined by x, e.g. --camera-size 704x256",
        )
    width, height = int(match[1]), int(match[2])
    if width < 1 or height < 1:
        raise UserError(
            f"camera size {width}x{height} has a zero side",
            "--camera-size",
            "give a width and height of at least 1 pixel, e.g. --camera-size 704x256",
        )
    return width, height


def _run_view(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from platform_lib.shards.check import explain_dataset_error
    from platform_lib.shards.training_view import ViewConfig, build_view

    try:
        width, height = parse_camera_size(args.camera_size)
        config = ViewConfig(
            camera_width=width,
            camera_height=height,
            quality=args.quality,
            overwrite=args.overwrite,
            workers=args.workers,
        )
    except UserError as exc:
        return _usage_error(exc)
    except ValidationError as exc:
        return _config_error(exc, "view")
    check_dataset_folder(args.dataset)
    try:
        manifest = build_view(args.dataset, args.output, config)
    except BuildError as exc:  # the output folder may not be written
        raise explain_dataset_error(exc, args.output) from exc
    print(
        f"built view {args.output} ({width}x{height}, quality {config.quality}) of "
        f"{args.dataset}: {manifest.num_samples} samples in {manifest.num_shards} shards, "
        f"{manifest.total_bytes / 1e6:.1f} MB, dataset_hash {manifest.dataset_hash}"
    )
    return 0


def add_data_commands(
    groups: argparse._SubParsersAction,
    more: Sequence[Callable[[argparse._SubParsersAction], None]] = (),
) -> None:
    """Add `data build`, `inspect`, `validate` and `view` to the top-level subparsers.

    `more`: functions adding further `data` commands from layers above this one (`data plan`).
    """
    data = groups.add_parser("data", help="build, inspect, validate, view and plan datasets")
    commands = data.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in more:
        add_command(commands)

    build = commands.add_parser("build", help="build a dataset from raw logs")
    build.add_argument("--source", choices=SOURCE_NAMES, required=True)
    build.add_argument(
        "--input",
        required=True,
        help="raw log folder (synthetic: generated here when it holds no logs)",
    )
    build.add_argument("--output", required=True, help="dataset folder to publish")
    build.add_argument(
        "--shard-size-mb", type=float, default=256.0, help="target shard size in MB (default 256)"
    )
    build.add_argument("--num-logs", type=int, help="synthetic: logs to generate")
    build.add_argument("--frames-per-log", type=int, help="synthetic: frames per log")
    build.add_argument("--seed", type=int, help="synthetic: generator seed")
    build.add_argument(
        "--quarantine",
        action="store_true",
        help="leave bad frames out and list them in the manifest",
    )
    build.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing dataset at --output (atomically)",
    )
    build.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes reading/encoding raw logs (same output bytes)",
    )
    build.add_argument(
        "--parts",
        choices=("packed", "per-log"),
        default="packed",
        help="packed: shards filled across logs, all in --output (default); per-log: the "
        "pipeline's build, one part per log in the part store ($DRIVETRAIN_PART_STORE, "
        "default $DRIVETRAIN_HOME/parts) merged into --output (same logs and settings: the "
        "pipeline's dataset hash); the layout shapes the bytes, so the hash",
    )
    build.add_argument(
        "--key-prefixes",
        type=int,
        default=1,
        help="spread shards over N key prefixes shards/pNN/ (default 1; see `data plan`)",
    )
    build.add_argument(
        "--split",
        choices=SPLIT_METHODS,
        default=None,
        help="train/val split method (default: the source's, pandaset "
        "by_frame_range, synthetic by_log)",
    )
    build.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="by_log: fraction of logs for val (default 0.25 synthetic, 0.2 else)",
    )
    build.add_argument("--val-logs", help="by_log: comma-separated val log ids")
    build.add_argument(
        "--val-frames-per-log",
        type=int,
        default=None,
        help="by_frame_range: last frames of each log for val (default 2)",
    )
    build.set_defaults(func=_run_build)

    inspect = commands.add_parser("inspect", help="print a dataset's manifest summary")
    inspect.add_argument("dataset", help="dataset folder or URL")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=_run_inspect)

    validate = commands.add_parser("validate", help="re-hash shards and check every member")
    validate.add_argument("dataset", help="dataset folder or URL")
    validate.set_defaults(func=_run_validate)

    view = commands.add_parser(
        "view", help="build a training view: cameras re-encoded at the model's resolution"
    )
    view.add_argument("dataset", help="parent dataset folder or URL (validated first)")
    view.add_argument("--output", required=True, help="view dataset folder to publish")
    view.add_argument(
        "--camera-size",
        required=True,
        metavar="WxH",
        help="camera image size in the view, pixels (e.g. 704x256; at most the parent's)",
    )
    view.add_argument(
        "--quality", type=int, default=90, help="JPEG quality of the re-encoded cameras (1-100)"
    )
    view.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset at --output"
    )
    view.add_argument(
        "--workers", type=int, default=1, help="processes re-encoding samples (same output bytes)"
    )
    view.set_defaults(func=_run_view)
