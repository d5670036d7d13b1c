"""Training: FSDP2 data-parallel train loop, distributed checkpoints, evaluation.

Chain: published dataset -> `build_loader` -> FSDP2 model -> AdamW steps -> DCP checkpoints and
metrics -> `model.safetensors` -> `evaluate`. Import from the modules (`train.train`,
`config.TrainConfig`, ...); `config.py` needs no torch. README.md in this package.
"""
