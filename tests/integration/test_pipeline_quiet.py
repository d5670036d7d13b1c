"""`pyflyte run` of the main workflow prints no warnings (issue 16: a clean run is quiet)."""

from __future__ import annotations

from tests.support.pipeline import run_pipeline_cli


def test_pyflyte_run_parses_the_workflow_inputs_without_warnings(
    isolated_env: dict[str, str],
) -> None:
    """`--help` parses the command line as a run does (where click warned about `--quarantine`)."""
    result = run_pipeline_cli(["--help"], isolated_env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "leave bad frames out" in result.stdout, result.stdout[-3000:]  # --quarantine help
    # flytekit logs through rich, to stdout: both streams must be free of warnings
    output = result.stdout + result.stderr
    warnings = [x for x in output.splitlines() if "warning" in x.lower()]
    assert warnings == [], output[-3000:]
