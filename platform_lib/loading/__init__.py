"""Streaming loader over Drivetrain shards: exact epochs, elastic resume, cache tier, mixing.

Chain: dataset URL(s) -> `shards.view` -> global order per (seed, epoch) -> per-rank batches
read into a shared-memory ring by persistent workers -> `loader.StreamingLoader`. Import from
the modules (`loader.build_loader`, `config.LoaderConfig`, ...); README.md in this package.
"""
