"""MLflow tracking, lineage tags and model registration (see README.md).

Import from the modules (`platform_lib.registry.register.load_champion`, ...): this package
re-exports nothing, so that `drivetrain --help` (whose `goodput`/`zoo` commands live in
`registry/commands.py`) does not import MLflow, torch or pyarrow.

    lineage.py       content hashes and ids of a model version (`build_lineage`)
    mlflow_store.py  tracking store, params, step metrics, eval tables
    register.py      model versions, aliases (candidate / champion), loading
    record.py        the pipeline's last step: one run recorded and registered
    goodput.py       goodput reports and step-time baselines in MLflow
    commands.py      `drivetrain goodput`, `drivetrain zoo check`
"""
