"""Fuzzing manifest.json: any bytes or JSON give a Manifest or a documented error, never a crash.

`load_manifest` documents `ManifestMissingError`, `ManifestError`, `NotRegularFileError` and
`OSError`; a manifest.json that exists as a regular file can only give `ManifestError`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_lib.shards.errors import ManifestError
from platform_lib.shards.manifest import Manifest, load_manifest
from tests.support.datasets import write_test_dataset

_SETTINGS = settings(
    max_examples=150,
    deadline=500,  # ms per example
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)


@pytest.fixture(scope="module")
def valid() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_test_dataset(Path(tmp) / "data", {"loga": 2, "logb": 2})
        return json.loads((root / "manifest.json").read_text())


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return tmp_path


def _load(folder: Path, raw: bytes) -> Manifest | None:
    (folder / "manifest.json").write_bytes(raw)
    try:
        return load_manifest(folder)
    except ManifestError as exc:
        assert str(exc) and "\n" not in str(exc)
        return None


#: How deep a JSON value is nested in lists: mostly not, sometimes past the recursion limit.
_depth = st.one_of(st.just(0), st.integers(1, 3_000))


@_SETTINGS
@given(raw=st.binary(max_size=300), depth=_depth)
def test_arbitrary_bytes(folder, raw, depth):
    assert _load(folder, b"[" * depth + raw + b"]" * depth) is None


@_SETTINGS
@given(value=_json, depth=_depth)
def test_arbitrary_json(folder, value, depth):
    text = "[" * depth + json.dumps(value) + "]" * depth
    assert _load(folder, text.encode()) is None


@_SETTINGS
@given(data=st.data())
def test_valid_manifest_with_one_field_replaced(folder, valid, data):
    manifest = json.loads(json.dumps(valid))
    node, path = manifest, []
    while isinstance(node, dict | list) and node and data.draw(st.booleans(), label="descend"):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys), label="key")
        path.append(key)
        if not isinstance(node[key], dict | list):
            break
        node = node[key]
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    if path:
        parent[path[-1]] = data.draw(_json, label="value")
    result = _load(folder, json.dumps(manifest).encode())
    assert result is None or isinstance(result, Manifest)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 200_000 + b"]" * 200_000,  # nesting deeper than the recursion limit
        b'{"format_version": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
        b'{"format_version": ' + b"9" * 10_000 + b"}",  # an int over the str-digits limit
        b'{"format_version": 1, "shards": [{"path": "shards/../../etc/passwd"}]}',
        b"\xff\xfe\x00garbage",
        b"",
    ],
)
def test_hostile_manifests_give_a_manifest_error(folder, raw):
    assert _load(folder, raw) is None
