"""Fuzzed tar bytes reach `iter_tar_members` (buffer and stream): random and mutated 512-byte
headers (checksum fixed up, so the mutation reaches the field parsing) and truncated archives.
Only `ShardFormatError` may come out, within a bounded time and memory per example."""

from __future__ import annotations

import io
import tarfile
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_lib.shards.errors import ShardFormatError
from platform_lib.shards.tar import BLOCK_SIZE, TAR_FORMAT, iter_tar_members, make_tarinfo

#: Most bytes one example may allocate while parsing (the inputs are a few KiB).
MAX_PEAK_BYTES = 4 << 20
FUZZ = settings(
    max_examples=150,
    deadline=500,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def _valid_tar() -> bytes:
    """Two members as the shard writer lays them out: one with a PAX name, one plain."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=TAR_FORMAT) as tar:
        for name, data in (("k" * 120 + ".lidar.npy", b"\x93NUMPY" * 40), ("k_1.json", b"{}")):
            tar.addfile(make_tarinfo(name, len(data)), io.BytesIO(data))
    return buffer.getvalue()


VALID = _valid_tar()
#: Offsets of every header block: the PAX header, the header it describes, the plain header.
HEADERS = sorted(
    {at for m in iter_tar_members(VALID) for at in (m.header_offset, m.data_offset - BLOCK_SIZE)}
)


def _fix_checksum(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)


def _walk(data: bytes) -> None:
    """Walk `data` as a buffer and as a stream, with and without member data."""
    tracemalloc.start()
    try:
        for source in (lambda: memoryview(data), lambda: io.BytesIO(data)):
            for read_data in (True, False):
                try:
                    for member in iter_tar_members(source(), shard="fuzz", read_data=read_data):
                        assert 0 <= member.size and member.data_offset % BLOCK_SIZE == 0
                        if read_data:
                            assert len(member.data) == member.size
                except ShardFormatError as exc:
                    assert "\n" not in str(exc) and "fuzz" in str(exc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MAX_PEAK_BYTES


@FUZZ
@given(
    st.binary(min_size=BLOCK_SIZE, max_size=BLOCK_SIZE),
    st.sampled_from([None, b"0", b"x", b"g", b"L", b"5"]),
    st.integers(0, 2 * BLOCK_SIZE),
    st.binary(min_size=BLOCK_SIZE, max_size=BLOCK_SIZE),
    st.booleans(),
)
def test_random_headers(header, kind, size, records, fix_checksum):
    """A random header (of a chosen type and size, or fully random) before random records."""
    block = bytearray(header)
    if kind is not None:
        block[156:157], block[124:136] = kind, b"%011o\0" % size
    if fix_checksum:
        _fix_checksum(block)
    _walk(bytes(block) + records + VALID)


@FUZZ
@given(
    st.sampled_from(HEADERS),
    st.lists(
        st.tuples(st.integers(0, BLOCK_SIZE - 1), st.integers(0, 255)), min_size=1, max_size=8
    ),
    st.booleans(),
)
def test_mutated_headers(at, changes, fix_checksum):
    data = bytearray(VALID)
    block = bytearray(data[at : at + BLOCK_SIZE])
    for position, value in changes:
        block[position] = value
    if fix_checksum:
        _fix_checksum(block)
    data[at : at + BLOCK_SIZE] = block
    _walk(bytes(data))


@FUZZ
@given(st.sampled_from(HEADERS), st.integers(0, 11), st.sampled_from([b"\x80", b"\xff", b"7"]))
def test_giant_and_negative_sizes(at, digit, lead):
    """Base-256 size fields (GNU): giant and negative sizes in a valid-checksum header."""
    data = bytearray(VALID)
    block = bytearray(data[at : at + BLOCK_SIZE])
    block[124:136] = lead + bytes([0xFF] * digit) + bytes(11 - digit)
    _fix_checksum(block)
    data[at : at + BLOCK_SIZE] = block
    _walk(bytes(data))


@FUZZ
@given(st.integers(0, len(VALID)))
def test_truncated_archives(cut):
    """A cut anywhere but between members is reported, never taken for the archive's end."""
    members = list(iter_tar_members(VALID))
    clean = {0, *(m.header_offset for m in members)}
    if cut in clean or cut >= members[-1].data_offset + members[-1].size:
        _walk(VALID[:cut])
        return
    for source in (VALID[:cut], io.BytesIO(VALID[:cut])):
        with pytest.raises(ShardFormatError, match=rf"fuzz.*byte offset {cut}.*truncated"):
            list(iter_tar_members(source, shard="fuzz", read_data=False))
    _walk(VALID[:cut])


def test_the_documented_errors_name_what_is_wrong():
    with pytest.raises(ShardFormatError, match=r"shard s, byte offset 0: corrupt tar header"):
        list(iter_tar_members(b"\x01" * BLOCK_SIZE, shard="s"))
    cut = HEADERS[-1] + 100
    with pytest.raises(ShardFormatError, match=rf"byte offset {cut}: truncated shard.*tar header"):
        list(iter_tar_members(VALID[:cut], shard="s"))
