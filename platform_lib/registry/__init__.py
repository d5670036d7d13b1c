"""MLflow lineage tags and model registration.

Chain: a finished run -> `record.py` (the pipeline's last step) -> `lineage.py` (hashes and
ids) -> `register.py` (model version, aliases, `load_champion`); the tracking store itself is
`platform_lib/mlflow_store.py`. Import from the modules; README.md in this package.
"""
