"""MLflow tracking, lineage tags and model registration.

Chain: a finished run -> `record.py` (the pipeline's last step) -> `mlflow_store.py` (params,
metrics, eval table) + `lineage.py` (hashes and ids) -> `register.py` (model version, aliases,
`load_champion`); `goodput.py` publishes goodput and baselines, `commands.py` is
`drivetrain goodput`. Import from the modules: this package re-exports nothing, so that
`drivetrain --help` does not import MLflow, torch or pyarrow. README.md in this package.
"""
