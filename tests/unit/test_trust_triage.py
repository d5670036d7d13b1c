"""Triage reads logs as collectors deliver them, and evidence files of any JSON shape.

Each corpus log coloured as kubectl/stern keep it (ANSI pod prefixes, coloured levels and
rank prefixes, CRLF endings) must get the verdict of the plain log; JSON evidence of odd
shapes must give a verdict with a note (or the one documented error), never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from platform_lib.cli import main
from platform_lib.fsguard import NotRegularFileError
from platform_lib.triage.classifier import classify
from platform_lib.triage.logs import LINES_KEPT_PER_RULE, clean_line, load_evidence

CORPUS = Path(__file__).resolve().parents[1] / "data" / "triage"
EXPECTATIONS: dict[str, dict] = json.loads((CORPUS / "expectations.json").read_text())
LOG_CASES = sorted(k for k in EXPECTATIONS if (CORPUS / k).is_file())

_LEVEL = re.compile(r"\b(INFO|WARNING|WARN|ERROR|CRITICAL)\b")
_RANK = re.compile(r"^(\[(?:rank|default)\d+\]:)")


def _colour(line: str, n: int) -> str:
    """`line` as stern shows it: coloured pod and container, coloured level and rank prefix."""
    line = _RANK.sub(lambda m: f"\x1b[1;35m{m.group(1)}\x1b[0m", line)
    line = _LEVEL.sub(lambda m: f"\x1b[32m{m.group(1)}\x1b[0m", line, count=1)
    pod = f"\x1b[36mtrainer-worker-{n % 4}\x1b[0m \x1b[33mpytorch\x1b[0m "
    return pod + line + "\x1b]0;title\x07" * (n % 7 == 0)


def _comparable(verdict) -> dict:
    d = verdict.to_dict()
    return {k: d[k] for k in ("class", "root_line", "rank", "pid", "signal", "fingerprint")} | {
        "confidence": d["confidence"],
        "where": [f["where"] for f in d["root"] + d["cascades"]],
    }


@pytest.mark.parametrize("case", LOG_CASES)
def test_coloured_crlf_log_gets_the_plain_verdict(case: str, tmp_path: Path) -> None:
    plain = CORPUS / case
    text = plain.read_text()
    coloured = tmp_path / plain.name
    coloured.write_bytes(
        "".join(_colour(line, n) + "\r\n" for n, line in enumerate(text.splitlines())).encode()
    )
    assert _comparable(classify(load_evidence(coloured))) == _comparable(
        classify(load_evidence(plain))
    )


def test_clean_line_strips_escapes_cr_and_collector_prefixes() -> None:
    assert clean_line("\x1b[31mRuntimeError\x1b[0m: boom\r") == "RuntimeError: boom"
    assert clean_line("\x1b[36mtrainer-0\x1b[0m \x1b[33mpytorch\x1b[0m [rank1]: x") == "[rank1]: x"
    assert clean_line("[pod/trainer-0/pytorch] E1201 x") == "E1201 x"
    assert clean_line("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b[2K\x1b(B") == "link "
    assert clean_line("\x1b[32mINFO\x1b[0m step 5") == "INFO step 5"  # a level is no pod


def _folder(tmp_path: Path, name: str, content: bytes) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rank0.log").write_text(
        "2026-12-01 10:00:00,000 RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    (folder / name).write_bytes(content)
    return folder


ODD_EVIDENCE = {
    "list_pod": ("pod_status.json", b'[{"status": {"reason": "OOMKilled"}}]'),
    "string_pod": ("pod_status.json", b'"Evicted"'),
    "string_status": ("pod_status.json", b'{"status": "Failed"}'),
    "odd_conditions": (
        "pod_status.json",
        b'{"status": {"conditions": ["x", 3, null, {"reason": ["a"]}], "containerStatuses": '
        b'[{"state": "terminated"}, {"state": {"terminated": 5}}, 7]}}',
    ),
    "deep_pod": ("pod_status.json", b"[" * 100_000 + b"]" * 100_000),
    "deep_object": ("pod_status.json", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    "huge_number": ("pod_status.json", b'{"status": {"reason": ' + b"9" * 5000 + b"}}"),
    "non_utf8": ("pod_status.json", b'{"status": {"reason": "\xff\xfe"}}'),
    "not_json": ("pod_status.json", b"{status: Evicted"),
    "exit_object": ("exit_codes.json", b'{"rank": 1, "exitcode": -9}'),
    "exit_strings": ("exit_codes.json", b'["rank 1 exitcode -9", 5]'),
    "error_list": ("error.json", b'[{"message": "x"}]'),
    "error_odd_message": (
        "error.json",
        b'{"message": {"extraInfo": {"timestamp": 1e300, "py_callstack": ["x"]}, "message": 5}}',
    ),
}


@pytest.mark.parametrize("kind", sorted(ODD_EVIDENCE))
def test_odd_evidence_gives_a_verdict_with_a_note(kind: str, tmp_path: Path, capsys) -> None:
    name, content = ODD_EVIDENCE[kind]
    folder = _folder(tmp_path, name, content)
    verdict = classify(load_evidence(folder))
    assert str(verdict.failure_class) == "user_code"  # the log still decides
    if kind != "error_odd_message":  # a valid error object: its odd fields are just empty
        assert any(name in note for note in verdict.notes), verdict.notes
        assert "note: " in verdict.describe()
    assert main(["triage", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == list(verdict.notes)


def test_huge_exit_codes_and_bad_records(tmp_path: Path, capsys) -> None:
    folder = _folder(tmp_path, "exit_codes.json", b'[{"rank": 1, "exitcode": 1e999, "pid": "x"}]')
    with pytest.raises(ValueError, match="exit_codes.json"):
        load_evidence(folder)
    assert main(["triage", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    (folder / "exit_codes.json").write_text('[{"rank": 1, "exitcode": ' + "9" * 300 + "}]")
    verdict = classify(load_evidence(folder))
    assert verdict.failure_class.value == "user_code" and verdict.notes == ()


def test_fifo_log_is_one_line_error(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "live.log"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError):
        load_evidence(fifo)
    assert main(["triage", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert "FIFO" in err and err.count("\n") == 1
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(CORPUS / LOG_CASES[0], folder / "rank0.log")
    os.mkfifo(folder / "rank1.log")
    verdict = classify(load_evidence(folder))  # the FIFO is skipped, with a note
    assert verdict.root_line == EXPECTATIONS[LOG_CASES[0]]["root_line"]
    assert any("rank1.log" in n and "regular" in n for n in verdict.notes)


def test_repeated_lines_are_capped_and_counted(tmp_path: Path) -> None:
    log = tmp_path / "noisy.log"
    noise = "".join(
        f"2026-12-01 10:{n // 60 % 60:02d}:{n % 60:02d},000 NCCL INFO comm {n} rank 0\n"
        for n in range(1000)
    )
    log.write_text(noise + "2026-12-01 11:00:00,000 ValueError: config must be positive\n")
    verdict = classify(load_evidence(log))
    assert verdict.root_line.endswith("ValueError: config must be positive")
    dropped = 1000 - 2 * LINES_KEPT_PER_RULE
    assert any(f"{dropped} lines of nccl-info" in n for n in verdict.notes), verdict.notes
