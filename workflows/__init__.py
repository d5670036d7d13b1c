"""Flyte workflows and launch plans: wiring only; tasks in `tasks/`, logic in `platform_lib/`."""
