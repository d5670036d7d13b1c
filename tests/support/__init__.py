"""Test support code shared by tests/unit and tests/integration: data makers and service starters.

Set-up that a test only needs to name is a fixture in a conftest.py (tests/conftest.py for
both folders, tests/integration/conftest.py for servers); what a test calls with arguments
(write a small dataset, draw a timeline, start a launch that fails) lives here and is imported
as `from tests.support.<module> import ...`. Modules that are also scripts (golden_run.py,
triage_real.py, launches.py) import only the library, so they run as `python <path>` too.
"""
