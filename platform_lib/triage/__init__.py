"""Failed-run triage: root cause vs. cascades, failure class, restart policy.

Chain: a failed attempt's evidence (`logs.py`) -> rules (`rules.py`) -> `classifier.classify`
-> `Verdict` -> `policy.decide_restart`; `attempt.py` is the hook a task calls. Import from the
modules; README.md in this package.
"""
