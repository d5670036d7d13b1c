"""Model-zoo gate: each CPU preset trains a few steps and must match its golden losses."""
