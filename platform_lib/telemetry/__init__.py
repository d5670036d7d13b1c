"""Telemetry: step recorder, goodput and badput, step anomalies, stragglers, MFU, baselines.

Chain: training loop -> `recorder.StepRecorder` (per rank, per step) -> `report.build_report`
-> baseline comparison -> `goodput.json` / `goodput.html`. Import from the modules; only the
recorder imports torch. README.md in this package; figures defined in docs/goodput.md.
"""
