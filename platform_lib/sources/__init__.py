"""Raw driving-log readers: each source lists its logs and yields canonical `Frame`s.

Chain: raw log folder -> `iter_<source>_frames(log_dir)` -> `Frame | FrameError` per frame
(validated by `validate_frame`) -> shard writer; `catalog.py` names the formats and dispatches
by name. Import from the modules (see README.md in this package).
"""
