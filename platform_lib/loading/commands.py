"""`drivetrain data plan`: what a fleet reading a dataset does to the object store (`fleet.py`).

One table row per combination of `--nodes`, `--shard-size-mb` and `--prefixes` (each may be a
comma-separated list): GETs, 503 SlowDown answers, GET/s of the busiest key prefix (peak and
p99 over 1-s buckets), bytes per node, node-cache hit ratio and each rank's time to first
batch. The dataset is a built one (its manifest and index give shards, sizes and prefixes) or a
hypothetical one (`--samples` or `--shards`, `--sample-mb`, `--shard-size-mb`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from typing import Any

from platform_lib.errors import UserError

# numpy, pydantic and the model are imported inside the command: `drivetrain` starts light.

__all__ = ["add_plan_command", "format_plan_table", "run_plan"]

_COLUMNS = (
    ("nodes", "nodes"),
    ("ranks", "ranks"),
    ("shard MB", "shard_mb"),
    ("shards", "shards"),
    ("prefixes", "prefixes"),
    ("steps", "steps"),
    ("GETs", "gets"),
    ("503s", "throttled"),
    ("failed", "exhausted"),
    ("peak GET/s", "peak_gets_per_s"),
    ("p99 GET/s", "p99_gets_per_s"),
    ("GB/node", "gb_per_node"),
    ("hit ratio", "hit_ratio"),
    ("1st batch med s", "first_batch_median_s"),
    ("1st batch max s", "first_batch_max_s"),
    ("epoch s", "end_s"),
)


def _numbers(text: str | None, flag: str, kind: type = int) -> list[Any]:
    """Parse a positive number or comma-separated list of them; one-line UserError naming `flag`."""
    if text is None:
        return []
    try:
        values = [kind(part) for part in str(text).split(",")]
    except ValueError:
        values = []
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise UserError(
            f"{flag} must be a positive {'whole ' if kind is int else ''}number or a "
            f"comma-separated list of them, got {text!r}",
            flag,
            f"e.g. {flag} 8 or {flag} 8,64,512",
        )
    return values


def _one(text: str | None, flag: str, kind: type = int) -> Any:
    values = _numbers(text, flag, kind)
    if len(values) > 1:
        raise UserError(f"{flag} takes one value, got {text!r}", flag, "give a single number")
    return values[0] if values else None


def _row(report: Any, shard_mb: float) -> dict[str, Any]:
    import numpy as np

    prefix, peak, p99 = report.busiest_prefix()
    spec = report.spec
    return {
        "nodes": spec.nodes,
        "ranks": spec.nodes * spec.ranks_per_node,
        "shard_mb": round(shard_mb, 1),
        "shards": len(report.gets_per_shard),
        "prefixes": len(report.gets_per_second),
        "steps": report.steps,
        "gets": report.gets,
        "throttled": report.throttled,
        "exhausted": report.exhausted,
        "busiest_prefix": prefix,
        "peak_gets_per_s": round(peak),
        "p99_gets_per_s": round(p99),
        "gb_per_node": round(float(report.bytes_per_node.mean()) / 1e9, 1),
        "hit_ratio": round(report.hit_ratio, 3),
        "first_batch_median_s": round(float(np.median(report.first_batch_s)), 2),
        "first_batch_max_s": round(float(report.first_batch_s.max()), 2),
        "end_s": round(report.end_s, 1),
    }


def format_plan_table(rows: list[dict[str, Any]]) -> str:
    """Return `rows` (from `run_plan`) as a Markdown table."""
    lines = [
        "| " + " | ".join(title for title, _ in _COLUMNS) + " |",
        "|" + "---:|" * len(_COLUMNS),
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(row[key]) for _, key in _COLUMNS) + " |")
    return "\n".join(lines)


def _specs(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """FleetSpec fields common to every row, and the LoaderConfig."""
    from pydantic import ValidationError

    from platform_lib.loading.config import LoaderConfig

    loader: dict[str, Any] = {}
    for flag, name, kind in (
        ("--prefetch-depth", "prefetch_depth", int),
        ("--shards-ahead", "shards_ahead", int),
        ("--shuffle-buffer", "shuffle_buffer", int),
    ):
        value = getattr(args, name)
        if value is not None:
            loader[name] = _one(value, flag, kind) if name != "shards_ahead" else int(value)
    if args.cache_limit_gb is not None:
        loader["cache_limit_bytes"] = int(
            _one(args.cache_limit_gb, "--cache-limit-gb", float) * 1e9
        )
    try:
        config = LoaderConfig(**loader)
    except ValidationError as exc:
        raise UserError(
            f"bad loader option ({exc.errors()[0]['msg']})", "--shards-ahead", "give a value >= 0"
        ) from None
    common = {
        "ranks_per_node": _one(args.ranks_per_node, "--ranks-per-node"),
        "workers": _one(args.workers, "--workers"),
        "batch_size": _one(args.batch_size, "--batch-size"),
        "epochs": _one(args.epochs, "--epochs"),
        "max_steps": _one(args.steps, "--steps"),
        "node_bandwidth": _one(args.bandwidth_gbit, "--bandwidth-gbit", float) * 1e9 / 8,
        "sample_time_s": _one(args.sample_time_ms, "--sample-time-ms", float) / 1e3,
        "request_latency_s": _one(args.latency_ms, "--latency-ms", float) / 1e3,
        "prefix_gets_per_s": _one(args.prefix_gets_per_s, "--prefix-gets-per-s", float),
        "seed": args.seed,
    }
    return common, config


def _datasets(args: argparse.Namespace, config: Any) -> list[tuple[float, int | None, Any]]:
    """(shard MB, prefixes, FleetDataset) for every shard size x prefix count asked for."""
    from platform_lib.loading.fleet import dataset_from_view, synthetic_dataset

    prefixes: list[int | None] = list(_numbers(args.prefixes, "--prefixes")) or [None]
    if any(p is not None and p > 100 for p in prefixes):
        raise UserError(f"--prefixes {args.prefixes} is over 100", "--prefixes", "use 1 to 100")
    hypothetical = args.samples is not None or args.shards is not None
    if args.dataset and hypothetical:
        raise UserError(
            "a DATASET and --samples/--shards both given",
            "--samples/--shards",
            "model either a built dataset or a hypothetical one",
        )
    if args.dataset:
        if args.shard_size_mb is not None:
            raise UserError(
                "--shard-size-mb is the dataset's own",
                "--shard-size-mb",
                "leave it out with a DATASET (use --samples or --shards to model other sizes)",
            )
        import numpy as np

        from platform_lib.shards.view import load_view

        view = load_view(args.dataset, split=args.split)
        shard_mb = float(np.mean(view.shard_bytes)) / 1e6 if len(view.shard_bytes) else 0.0
        try:
            return [(shard_mb, p, dataset_from_view(view, config, prefixes=p)) for p in prefixes]
        except ValueError as exc:
            raise UserError(str(exc), args.dataset, "check --split and the dataset") from None
    if not hypothetical:
        raise UserError(
            "no dataset to model",
            "DATASET",
            "give a dataset folder or URL, or a hypothetical one with --samples N (or --shards S)",
        )
    if args.samples is not None and args.shards is not None:
        raise UserError("--samples and --shards both given", "--samples/--shards", "give one")
    sample_mb = _one(args.sample_mb, "--sample-mb", float)
    sample_bytes = max(1, int(sample_mb * 1e6))
    out = []
    for shard_mb, p in itertools.product(
        _numbers(args.shard_size_mb or "256", "--shard-size-mb", float), prefixes
    ):
        shard_bytes = int(shard_mb * 1e6)
        per_shard = max(1, shard_bytes // sample_bytes)
        samples = (
            _one(args.samples, "--samples")
            if args.samples is not None
            else _one(args.shards, "--shards") * per_shard
        )
        data = synthetic_dataset(
            num_samples=samples, sample_bytes=sample_bytes, shard_bytes=shard_bytes, prefixes=p or 1
        )
        out.append((per_shard * sample_bytes / 1e6, p, data))
    return out


def run_plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Return one table row (a dict) per (nodes, shard size, prefixes) the arguments ask for.

    Raises:
        UserError: a zero, negative or malformed value (names the flag), an impossible layout
            (more ranks than samples), or a dataset that cannot be read.
    """
    from platform_lib.loading.fleet import FleetSpec, simulate_fleet

    nodes = _numbers(args.nodes, "--nodes")
    common, config = _specs(args)
    rows = []
    for shard_mb, _, data in _datasets(args, config):
        for n in nodes:
            world = n * common["ranks_per_node"]
            if world > len(data.units):
                raise UserError(
                    f"{world} ranks ({n} nodes x {common['ranks_per_node']} ranks per node) but "
                    f"only {len(data.units)} samples; every rank needs one",
                    "--nodes/--ranks-per-node",
                    "use fewer nodes or ranks per node, or a larger dataset",
                )
            report = simulate_fleet(FleetSpec(nodes=n, loader=config, **common), data)
            rows.append(_row(report, shard_mb))
    return rows


def _run(args: argparse.Namespace) -> int:
    rows = run_plan(args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(format_plan_table(rows))
    limit = _one(args.prefix_gets_per_s, "--prefix-gets-per-s", float)
    for row in rows:
        if row["throttled"]:
            wanted = row["prefixes"] * math.ceil(row["peak_gets_per_s"] / limit)
            print(
                f"throttled: {row['nodes']} nodes, {row['shard_mb']} MB shards on "
                f"{row['prefixes']} prefix(es) drew {row['throttled']} 503 SlowDown answers; "
                f"model --prefixes {min(wanted, 100)} and build with `drivetrain data build "
                "--key-prefixes N`"
            )
    return 0


def add_plan_command(commands: argparse._SubParsersAction) -> None:
    """Add `data plan` to the `data` group's subparsers."""
    plan = commands.add_parser(
        "plan",
        help="model what a fleet reading a dataset does to the object store",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    plan.add_argument("dataset", nargs="?", help="dataset folder or URL (omit with --samples)")
    plan.add_argument("--nodes", required=True, help="nodes, or a comma-separated list")
    plan.add_argument("--ranks-per-node", required=True, help="training ranks per node")
    plan.add_argument("--workers", default="4", help="loader workers per rank (default 4)")
    plan.add_argument("--batch-size", default="4", help="samples per batch per rank (default 4)")
    plan.add_argument("--epochs", default="1", help="epochs (default 1)")
    plan.add_argument("--steps", help="batches per rank simulated per epoch (default: all)")
    plan.add_argument("--split", default=None, help="dataset split to read (default: all rows)")
    plan.add_argument("--seed", type=int, default=0, help="loader seed (default 0)")
    plan.add_argument("--samples", help="hypothetical dataset: samples")
    plan.add_argument("--shards", help="hypothetical dataset: shards (instead of --samples)")
    plan.add_argument("--sample-mb", default="2", help="hypothetical: MB per sample (default 2)")
    plan.add_argument(
        "--shard-size-mb", help="hypothetical: shard size in MB, or a list (default 256)"
    )
    plan.add_argument(
        "--prefixes", help="key prefixes the shards are spread over, or a list (default: as built)"
    )
    plan.add_argument("--bandwidth-gbit", default="25", help="per-node download Gbit/s (25)")
    plan.add_argument("--sample-time-ms", default="50", help="training ms per sample (50)")
    plan.add_argument("--latency-ms", default="30", help="GET time to first byte in ms (30)")
    plan.add_argument(
        "--prefix-gets-per-s", default="5500", help="GET/s per prefix before 503 (5500, AWS)"
    )
    plan.add_argument("--prefetch-depth", help="LoaderConfig.prefetch_depth (default 2)")
    plan.add_argument("--shards-ahead", type=int, help="LoaderConfig.shards_ahead (default 1)")
    plan.add_argument("--shuffle-buffer", help="LoaderConfig.shuffle_buffer (default 2048)")
    plan.add_argument("--cache-limit-gb", help="node cache limit in GB (default 200 GiB)")
    plan.add_argument("--json", action="store_true", help="print the rows as JSON")
    plan.set_defaults(func=_run)
