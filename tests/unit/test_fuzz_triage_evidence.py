"""Fuzz triage's untrusted inputs: JSON evidence files of any value, logs of any bytes.

Documented outcomes only: a verdict (with notes for what was skipped), or for an exit record
that lacks its rank or exit code a `UserError` naming `exit_codes.json`. Never another
exception, and each example in bounded time (hypothesis deadline).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_lib.errors import UserError
from platform_lib.triage.classifier import Verdict, classify
from platform_lib.triage.logs import load_evidence

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
#: Values shaped like the real files, so that the inner type checks are reached.
_SHAPED = st.one_of(
    st.fixed_dictionaries({"status": _JSON}),
    st.fixed_dictionaries(
        {"status": st.fixed_dictionaries({"conditions": _JSON, "containerStatuses": _JSON})}
    ),
    st.lists(st.fixed_dictionaries({"rank": _JSON, "exitcode": _JSON, "pid": _JSON}), max_size=3),
    st.fixed_dictionaries(
        {"message": st.fixed_dictionaries({"extraInfo": _JSON, "message": _JSON})}
    ),
)
_NAMES = st.sampled_from(["pod_status.json", "exit_codes.json", "error.json"])


def _classify_folder(files: dict[str, bytes]) -> Verdict | None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        try:
            verdict = classify(load_evidence(tmp))
        except UserError as exc:  # documented: bad exit record, or nothing usable at all
            assert "exit_codes.json" in str(exc) or "no evidence" in str(exc), exc
            return None
    assert verdict.describe() and json.dumps(verdict.to_dict())
    return verdict


@settings(max_examples=120, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(name=_NAMES, value=_JSON | _SHAPED)
def test_any_json_evidence_gives_a_documented_outcome(name: str, value: object) -> None:
    data = json.dumps(value).encode()
    verdict = _classify_folder({name: data, "rank0.log": b"2026-12-01 10:00:00,000 step 1\n"})
    assert verdict is None or verdict.failure_class is not None


@settings(max_examples=60, deadline=2000)
@given(name=_NAMES, data=st.binary(max_size=200))
def test_any_bytes_as_json_evidence(name: str, data: bytes) -> None:
    _classify_folder({name: data, "rank0.log": b"x\n"})


@settings(max_examples=80, deadline=2000)
@given(
    lines=st.lists(
        st.binary(max_size=120)
        | st.sampled_from(
            [
                b"\x1b[31mRuntimeError\x1b[0m: boom\r",
                b"  [0]:",
                b"  rank      : 1 (local_rank: 1)",
                b"  time      : 2026-12-01_10:00:00",
                b"=" * 20,
                b"Root Cause (first observed failure):",
                b'  File "x.py", line 3, in f',
                b"E1201 10:00:00.000000 1 api.py:1] failed (exitcode: -9) local_rank: 0 (pid: 7) of fn",
                b"\x1b]0;t\x07\x1b[2K\r\xff\xfe",
            ]
        ),
        max_size=30,
    )
)
def test_any_bytes_as_log(lines: list[bytes]) -> None:
    verdict = _classify_folder({"rank0.log": b"\n".join(lines)})
    assert verdict is not None  # a log alone never fails to classify
