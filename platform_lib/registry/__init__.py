"""MLflow tracking, lineage tags and model registration.

Chain: a finished run -> `record.py` (the pipeline's last step) -> `mlflow_store.py` (params,
metrics, eval table) + `lineage.py` (hashes and ids) -> `register.py` (model version, aliases,
`load_champion`). Import from the modules; README.md in this package.
"""
