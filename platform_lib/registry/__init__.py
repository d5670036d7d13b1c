"""MLflow tracking, lineage tags and model registration.

<<<<<<< HEAD
Chain: a finished run -> `record.py` (the pipeline's last step) -> `mlflow_store.py` (params,
metrics, eval table) + `lineage.py` (hashes and ids) -> `register.py` (model version, aliases,
`load_champion`). Import from the modules; README.md in this package.
=======
Import from the modules (`platform_lib.registry.register.load_champion`, ...): this package
re-exports nothing, so that `drivetrain --help` (whose `goodput` command lives in
`registry/commands.py`) does not import MLflow, torch or pyarrow.

    lineage.py       content hashes and ids of a model version (`build_lineage`)
    mlflow_store.py  tracking store, params, step metrics, eval tables
    register.py      model versions, aliases (candidate / champion), loading
    record.py        the pipeline's last step: one run recorded and registered
    goodput.py       goodput reports and step-time baselines in MLflow
    commands.py      `drivetrain goodput`
>>>>>>> 0ded143 (training: an injection seam (hooks.py: at_step, on_batch, wrap_storage) the loop calls; fault injection moves to platform_lib/faults.py, the model-zoo gate, its dataset and golden files to platform_lib/zoo/ (drivetrain zoo check from zoo/commands.py))
"""
