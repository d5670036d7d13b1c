"""Low-level access to PandaSet raw files, with errors that name the file and what to do.

Files are looked up and opened only through the sequence's listing (`raw_files.RawFiles`, the
one the content hash covers), with the size and JSON-nesting bounds of `raw_files`. PandaSet
ships lidar points and annotations as gzip'd pandas pickles; `FramePickleUnpickler` resolves
only the numpy/pandas globals a DataFrame pickle names (`_FRAME_GLOBALS`) and refuses any other
(`os.system`, `builtins.eval`, ...) before it is imported, so a hostile raw-log file cannot run
code at build time.

Layout of one sequence folder (as published by the PandaSet devkit):
    camera/<name>/NN.jpg, intrinsics.json {fx,fy,cx,cy}, poses.json, timestamps.json
    lidar/NN.pkl.gz (DataFrame x,y,z,i,t,d in world coords), poses.json, timestamps.json
    annotations/cuboids/NN.pkl.gz, annotations/semseg/NN.pkl.gz (+ classes.json), meta/
    poses.json: per frame {"position": {x,y,z}, "heading": {w,x,y,z}} = world_from_sensor
"""

from __future__ import annotations

import gzip
import pickle
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from platform_lib.sources.frame import FrameError
from platform_lib.sources.geometry import make_transform, quaternion_to_matrix
from platform_lib.sources.raw_files import MAX_ARRAY_BYTES, MAX_JSON_BYTES, RawFiles, parse_json

__all__ = [
    "index_numbered_files",
    "load_json",
    "FramePickleUnpickler",
    "load_pickled_frame",
    "parse_pose",
    "require_columns",
]

_NUMBERED = re.compile(r"^(\d+)\.(jpg|pkl\.gz)$")


def index_numbered_files(files: RawFiles, folder: Path, suffix: str) -> dict[int, Path]:
    """Return {frame index: path} for listed files `NN<suffix>` in `folder` (empty if absent)."""
    out: dict[int, Path] = {}
    for name in files.names_in(folder):
        match = _NUMBERED.match(name)
        if match and name.endswith(suffix):
            out[int(match.group(1))] = folder / name
    return out


def load_json(path: Path, *, files: RawFiles, log_id: str | None = None):
    """Load a JSON metadata file (at most `MAX_JSON_BYTES`, nested at most `MAX_JSON_DEPTH`).

    Raises:
        FrameError: reason "missing_file" if absent, "corrupt_metadata" if not valid UTF-8
            JSON or nested too deep.
        UserError: larger than `MAX_JSON_BYTES`; NotRegularFileError: not a regular file.
    """
    if not files.has_file(path):
        raise FrameError(
            f"{path}: required PandaSet metadata file is missing; re-copy the sequence folder "
            "from the original download",
            path=path,
            reason="missing_file",
            log_id=log_id,
        )
    data = files.read(path, max_bytes=MAX_JSON_BYTES)
    try:
        return parse_json(data)
    except ValueError as exc:
        raise FrameError(
            f"{path}: not valid JSON ({exc}); re-copy it from the original download",
            path=path,
            reason="corrupt_metadata",
            log_id=log_id,
        ) from exc


def parse_pose(
    poses: list,
    index: int,
    path: Path,
    *,
    log_id: str | None = None,
    frame_index: int | None = None,
) -> np.ndarray:
    """Return the (4, 4) world_from_sensor transform of entry `index` of a poses.json list.

    Raises:
        FrameError: reason "count_mismatch" if the list is too short, "bad_pose" if malformed.
    """
    if not isinstance(poses, list) or index >= len(poses):
        count = len(poses) if isinstance(poses, list) else "no"
        raise FrameError(
            f"{path}: holds {count} poses but frame {index} needs one; the poses file and the "
            "sensor data disagree on the number of frames: re-export the sequence or quarantine "
            "the frame",
            path=path,
            reason="count_mismatch",
            log_id=log_id,
            frame_index=frame_index,
        )
    try:
        heading, position = poses[index]["heading"], poses[index]["position"]
        rotation = quaternion_to_matrix(heading["w"], heading["x"], heading["y"], heading["z"])
        translation = np.array([position["x"], position["y"], position["z"]], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise FrameError(
            f"{path}: pose {index} is malformed ({exc!r}); expected "
            '{"position": {x,y,z}, "heading": {w,x,y,z}}',
            path=path,
            reason="bad_pose",
            log_id=log_id,
            frame_index=frame_index,
        ) from exc
    if not np.all(np.isfinite(translation)):
        raise FrameError(
            f"{path}: pose {index} has a non-finite position",
            path=path,
            reason="bad_pose",
            log_id=log_id,
            frame_index=frame_index,
        )
    return make_transform(rotation, translation)


#: (module, name) of every global a pandas DataFrame pickle may name (pandas 1.x-3.x, numpy
#: 1.x-2.x): data constructors only, none that calls, imports or evaluates anything else;
#: numpy 1's `numpy.core` is read as numpy 2's `numpy._core`.
_FRAME_GLOBALS = frozenset(
    {
        ("builtins", "slice"),
        ("builtins", "bytearray"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.numeric", "_frombuffer"),
        ("pandas", "DataFrame"),
        ("pandas", "Series"),
        ("pandas", "Index"),
        ("pandas", "RangeIndex"),
        ("pandas.core.frame", "DataFrame"),
        ("pandas.core.series", "Series"),
        ("pandas.core.indexes.base", "Index"),
        ("pandas.core.indexes.base", "_new_Index"),
        ("pandas.core.indexes.range", "RangeIndex"),
        ("pandas.core.internals.managers", "BlockManager"),
        ("pandas.core.internals.managers", "SingleBlockManager"),
        ("pandas.core.internals.blocks", "new_block"),
        ("pandas._libs.internals", "_unpickle_block"),
        # pandas 3 string columns and column names (Arrow-backed)
        ("pandas", "StringDtype"),
        ("pandas.arrays", "ArrowStringArray"),
        ("pyarrow.lib", "_restore_array"),
        ("pyarrow.lib", "py_buffer"),
        ("pyarrow.lib", "type_for_alias"),
    }
)


class FramePickleUnpickler(pickle.Unpickler):
    """Unpickler that builds pandas DataFrames and refuses every other global (no foreign code).

    Raises:
        pickle.UnpicklingError: the pickle names a global outside `_FRAME_GLOBALS`.
    """

    def find_class(self, module: str, name: str) -> object:
        """Resolve `module.name` only when a DataFrame pickle may name it."""
        if module.startswith("numpy.core"):
            module = "numpy._core" + module.removeprefix("numpy.core")
        if (module, name) not in _FRAME_GLOBALS:
            raise pickle.UnpicklingError(
                f"refused global {module}.{name}: a PandaSet DataFrame pickle never names it "
                "(the file may be hostile)"
            )
        return super().find_class(module, name)


def load_pickled_frame(
    path: Path, *, files: RawFiles, reason: str, log_id: str, frame_index: int
) -> pd.DataFrame:
    """Load a gzip-pickled pandas DataFrame (PandaSet lidar/annotation file).

    Unpickled with `FramePickleUnpickler`: globals other than a DataFrame's are refused.

    Raises:
        FrameError: "missing_<what>" if absent; `reason` (e.g. "corrupt_lidar") if the gzip
            stream or the pickle is truncated/corrupt or does not hold a DataFrame.
        UserError: larger than `MAX_ARRAY_BYTES`; NotRegularFileError: not a regular file.
    """
    if not files.has_file(path):
        what = reason.removeprefix("corrupt_")
        raise FrameError(
            f"{path}: {what} file of frame {frame_index} is missing; re-copy it from the original "
            "download or quarantine the frame",
            path=path,
            reason=f"missing_{what}",
            log_id=log_id,
            frame_index=frame_index,
        )
    # Opened outside the try: a refused type or size is not a corrupt file.
    with files.open(path, max_bytes=MAX_ARRAY_BYTES) as handle:
        try:
            with gzip.GzipFile(fileobj=handle) as stream:
                df = FramePickleUnpickler(stream).load()
        except (
            EOFError,
            OSError,
            zlib.error,
            pickle.UnpicklingError,
            AttributeError,
            ImportError,
            IndexError,
            TypeError,
            ValueError,
        ) as exc:
            raise FrameError(
                f"{path}: cannot decompress/unpickle ({type(exc).__name__}: {exc}); the file is "
                "truncated or corrupt: re-copy it from the original download or quarantine the frame",
                path=path,
                reason=reason,
                log_id=log_id,
                frame_index=frame_index,
            ) from exc
    if not isinstance(df, pd.DataFrame):
        raise FrameError(
            f"{path}: holds a {type(df).__name__}, expected a pandas DataFrame; re-copy it",
            path=path,
            reason=reason,
            log_id=log_id,
            frame_index=frame_index,
        )
    return df


def require_columns(
    df: pd.DataFrame, columns: tuple[str, ...], path: Path, *, log_id: str, frame_index: int
) -> None:
    """Raise `FrameError` (reason "missing_column") naming the first absent column and the file."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FrameError(
            f"{path}: missing column(s) {missing} (has {list(df.columns)}); the file does not "
            "follow the PandaSet schema: re-export it or quarantine the frame",
            path=path,
            reason="missing_column",
            log_id=log_id,
            frame_index=frame_index,
        )
