"""Write and read a run's goodput report: `goodput.json` and `goodput.html` in the run folder.

Run folder layout (written by rank 0 at the end of `train()`):

    telemetry/rank-NNNNN.jsonl    every rank's step records and events, all attempts
    telemetry/timeline.json       all ranks gathered (multi-node runs have no shared disk)
    telemetry/trace-rank-*.json   torch.profiler window, when configured
    goodput.json                  the report (`report.build_report`), baseline comparison
    goodput.html                  the page the Flyte Deck shows (`deck.render_deck_html`; written
                                  by the training task after the baseline comparison, or by
                                  `drivetrain goodput RUN --html FILE`)
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from platform_lib.telemetry.timeline import Timeline, load_timeline

__all__ = [
    "GOODPUT_HTML",
    "GOODPUT_JSON",
    "TELEMETRY_DIR",
    "TIMELINE_JSON",
    "load_run_telemetry",
    "read_metrics_rows",
    "write_json_atomic",
    "write_run_report",
]

GOODPUT_JSON = "goodput.json"
GOODPUT_HTML = "goodput.html"
#: Folder of a run folder holding every rank's records (`rank-NNNNN.jsonl`).
TELEMETRY_DIR = "telemetry"
TIMELINE_JSON = f"{TELEMETRY_DIR}/timeline.json"


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write `data` as JSON to `path` via a temporary file and rename (readers never see half a file)."""
    _write_text_atomic(Path(path), json.dumps(data, indent=1, sort_keys=True))


def _write_text_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` via a temporary file beside it, unique per process and thread."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_metrics_rows(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return the rows of `run_dir/metrics.jsonl` ([] when absent)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_run_report(
    run_dir: str | os.PathLike[str],
    timeline: Timeline,
    report: dict[str, Any],
    *,
    html: bool = True,
) -> Path:
    """Write timeline.json, goodput.json and (with `html`) goodput.html into `run_dir`.

    Returns:
        The path of goodput.json.
    """
    run_dir = Path(run_dir)
    write_json_atomic(run_dir / TIMELINE_JSON, timeline.to_json())
    write_json_atomic(run_dir / GOODPUT_JSON, report)
    if html:
        from platform_lib.telemetry.deck import render_deck_html  # matplotlib: only for a page

        page = render_deck_html(timeline, report, read_metrics_rows(run_dir))
        _write_text_atomic(run_dir / GOODPUT_HTML, page)
    return run_dir / GOODPUT_JSON


def load_run_telemetry(run_dir: str | os.PathLike[str]) -> tuple[Timeline, dict[str, Any] | None]:
    """Return (timeline, stored report or None) of a run folder.

    Reads `telemetry/timeline.json` when present (all ranks), else the rank files.

    Raises:
        FileNotFoundError: the folder holds no telemetry (names it and says why).
    """
    run_dir = Path(run_dir)
    gathered = run_dir / TIMELINE_JSON
    if gathered.is_file():
        timeline = Timeline.from_json(json.loads(gathered.read_text()))
    elif (run_dir / TELEMETRY_DIR).is_dir():
        timeline = load_timeline(run_dir / TELEMETRY_DIR)
    else:
        raise FileNotFoundError(
            f"{run_dir} has no telemetry/ folder: it is not a training run folder, or the run "
            "predates telemetry"
        )
    report_path = run_dir / GOODPUT_JSON
    report = json.loads(report_path.read_text()) if report_path.is_file() else None
    return timeline, report
