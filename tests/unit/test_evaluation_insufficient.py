"""A slice with one or two val logs: the rule's result reads "insufficient" wherever it shows.

The champion gate (`registry.gate.decide_champion`) on real per-frame counts of 1 and 2 logs:
the tags, the per-slice table of promotion.html, the version's Markdown description and the
difference plot give the paired difference only as "insufficient: <n> log(s)", never as a
number, and the decision's last reason says what the user can do.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest

from platform_lib.evaluation.metrics import FrameCounts
from platform_lib.evaluation.plots import _difference_figure
from platform_lib.evaluation.promotion import PromotionConfig, decide_promotion
from platform_lib.registry.gate import decide_champion, render_version_description

FRAMES = 3
NUMBER = re.compile(r"[0-9]\.[0-9]")


def _pair(num_logs: int) -> tuple[FrameCounts, FrameCounts, dict[str, np.ndarray]]:
    """Champion and a clearly better challenger on `num_logs` logs of FRAMES frames each."""
    n = num_logs * FRAMES
    keys = tuple(f"log-{i // FRAMES:03d}_{i % FRAMES:06d}" for i in range(n))
    out = []
    for tp in (50, 90):  # of 100 true cells; 10 false positives
        counts = np.tile(np.array([tp, 10, 100 - tp]), (n, 1))
        out.append(FrameCounts(keys, ("vehicle",), ("all",), counts[:, None, None, :]))
    return out[0], out[1], {"all": np.ones(n, dtype=bool)}


@pytest.mark.parametrize("num_logs", [1, 2])
def test_too_few_logs_read_insufficient_everywhere_and_say_what_to_do(
    num_logs: int, tmp_path: Path
) -> None:
    champion, challenger, masks = _pair(num_logs)
    logs = "1 log" if num_logs == 1 else "2 logs"
    gate = decide_champion(
        "bev", ("1", champion), challenger, masks, [], PromotionConfig(), tmp_path
    )
    assert gate.decision == "kept:insufficient" and not gate.promote

    assert gate.tags["diff.all.iou/mean/all"] == "insufficient"
    reasons = gate.record["reasons"]
    assert f"insufficient, no interval ({logs}, {num_logs * FRAMES} frames" in reasons[0]
    assert reasons[-1].startswith("what you can do:")
    assert "at least 5 logs" in reasons[-1] and "promote_champion(" in reasons[-1]
    assert reasons[-1] in gate.tags["promotion_reasons"]

    page = html.unescape(gate.page.read_text())
    cells = re.findall(r"<tr><td>all</td><td>iou/mean/all</td>(.*?)</tr>", page)
    assert cells, page[-2000:]
    role, _, _, difference, _, verdict = re.findall(r"<td[^>]*>(.*?)</td>", cells[0])
    assert (role, difference, verdict) == ("primary+gated", f"insufficient: {logs}", "insufficient")

    description = render_version_description(gate.record, gate.decision)
    assert description.startswith("**champion decision: kept:insufficient**")
    row = next(line for line in description.splitlines() if line.startswith("| all |"))
    slice_, metric, candidate, held, diff, verdict = (c.strip() for c in row.strip("|").split("|"))
    assert (diff, verdict) == (f"insufficient: {logs}", "insufficient")
    assert not NUMBER.search(diff)
    assert candidate == f"0.8182 (insufficient: {logs})"  # 90 / (90 + 10 + 10)
    assert "what you can do:" in description and len(description) <= 5000

    decision = decide_promotion(champion, challenger, masks)
    figure = _difference_figure(decision)
    (points, *_) = figure.axes[0].lines
    assert np.isnan(np.asarray(points.get_xdata(), dtype=float)).all()  # no point drawn
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels == [f"all iou/mean/all (insufficient: {logs})"]


def test_a_long_table_is_cut_to_mlflows_description_limit_and_counted(tmp_path: Path) -> None:
    champion, challenger, masks = _pair(2)
    gate = decide_champion(
        "bev", ("1", champion), challenger, masks, [], PromotionConfig(), tmp_path
    )
    record = {**gate.record, "rows": gate.record["rows"] * 200}
    description = render_version_description(record, "kept:champion_changed")
    assert len(description) <= 5000
    assert "(the gate decided kept:insufficient; `champion` moved meanwhile)" in description
    assert re.search(r"\| \.\.\. \| [0-9]+ more rows in promotion/promotion\.html", description)
    assert description.rstrip().endswith("promotion/promotion.html of the run")
