"""Shard writer/reader pair over one index: frames -> tar shards + index.parquet + manifest.json.

Chain: `Frame`s -> `build.py` (check, encode, write size-capped tar shards, index, manifest last,
publish by rename) -> `view.py` (the one typed view every reader uses). Import from the modules;
the on-disk contract is docs/format.md, the module map README.md in this package.
"""
