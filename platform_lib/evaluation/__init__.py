"""Evaluation: per-frame BEV counts, slices, log-level bootstrap intervals, champion vs challenger.

Import from the modules (`metrics`, `slices`, `bootstrap`, `promotion`, `plots`).
"""
