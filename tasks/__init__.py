"""Flyte tasks: decorator settings (cache, retries, Elastic, resources) + calls into platform_lib."""
