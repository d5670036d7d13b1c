"""Drivetrain: raw driving logs -> shards -> streaming loader -> FSDP training -> registry.

Layers and what each may import: docs/architecture.md.
"""
