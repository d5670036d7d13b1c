"""Batch contracts between a model's sample transform and the loader (a contract; imports nothing)."""

from __future__ import annotations

__all__ = ["ByteRuns"]


class ByteRuns(tuple):
    """A sample's variable-length byte strings (e.g. its cameras' JPEGs), as 1-D uint8 arrays.

    A `sample_transform` output of this type is collated into one batch array (each run
    copied once into the ring's output area, like any stacked tensor) plus offsets:
    {"data": (total,) uint8, "offsets": (B * n + 1,) int64}, run j of sample i at
    data[offsets[i * n + j] : offsets[i * n + j + 1]] (every sample of a batch has n runs;
    an empty run is an empty slot).
    """

    __slots__ = ()
