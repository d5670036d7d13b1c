"""Distributed checkpoints (torch.distributed.checkpoint) and full-weight export (safetensors).

Layout of a checkpoint root:

    checkpoints/
      step-000100/            complete checkpoint (renamed into place only when finished)
        .complete             JSON {"step", "world_size"}; a folder without it is ignored
        .metadata, *.distcp   DCP files: sharded model + optimizer state
        extra-rank00000.pt    per-rank state: step, RNG states, loader state (when it has one)
      .tmp-step-000200/       an interrupted save; never read, removed by the next save

Saves are collective (every rank calls them) and atomic: DCP writes into a temporary
folder, rank 0 writes `.complete` and renames the folder. Loads need the same or a
different world size (DCP reshards); per-rank extra state is only restored for ranks that
existed at save time. Multi-node jobs need the root on a filesystem every node sees.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

__all__ = [
    "export_weights",
    "find_latest_checkpoint",
    "load_checkpoint",
    "load_weights",
    "save_checkpoint",
]

_STEP_DIR = re.compile(r"^step-(\d{6,})$")
COMPLETE_MARKER = ".complete"


def _step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def find_latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """Return the complete checkpoint folder with the highest step under `root`, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _STEP_DIR.match(p.name)) and (p / COMPLETE_MARKER).is_file()
    ]
    return max(found)[1] if found else None


def save_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    extra_state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Save model + optimizer (sharded, DCP) and this rank's `extra_state`; collective.

    Args:
        root: checkpoint root folder (created if missing).
        step: optimizer steps completed.
        model: the FSDP-wrapped model.
        optimizer: its optimizer.
        extra_state: per-rank picklable state of tensors / numbers / str / lists / dicts
            (loaded back with `weights_only=True`).
        keep: complete checkpoints kept; older ones are deleted by rank 0.

    Returns:
        The final checkpoint folder `root/step-NNNNNN`.
    """
    root = Path(root)
    final, tmp = _step_dir(root, step), root / f".tmp-step-{step:06d}"
    rank = dist.get_rank()
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
    torch.save(extra_state, tmp / f"extra-rank{rank:05d}.pt")
    dist.barrier()
    if rank == 0:
        marker = {"step": step, "world_size": dist.get_world_size()}
        (tmp / COMPLETE_MARKER).write_text(json.dumps(marker, sort_keys=True))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        complete = sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name))
        for old in complete[: max(0, len(complete) - keep)]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def load_checkpoint(
    path: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Load model + optimizer in place from checkpoint folder `path`; collective.

    Returns:
        This rank's extra state, or {"step": <step>} when the checkpoint was saved by fewer
        ranks than this rank's index (after an elastic resize).

    Raises:
        FileNotFoundError: if `path` is not a complete checkpoint.
    """
    path = Path(path)
    marker = path / COMPLETE_MARKER
    if not marker.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE_MARKER})")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    extra = path / f"extra-rank{dist.get_rank():05d}.pt"
    if extra.is_file():
        return torch.load(extra, weights_only=True)
    return {"step": json.loads(marker.read_text())["step"]}


def export_weights(
    model: nn.Module, path: str | os.PathLike[str], metadata: dict[str, str] | None = None
) -> Path | None:
    """Gather the full (unsharded, fp32) model weights and write them to safetensors; collective.

    Rank 0 writes `path` atomically (temporary name, then rename); other ranks return None.
    """
    full = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if dist.get_rank() != 0:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tensors = {k: v.detach().float().contiguous() for k, v in full.items()}
    save_file(tensors, str(tmp), metadata=metadata or {})
    os.replace(tmp, path)
    return path


def load_weights(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Load a safetensors weight file (no pickle) as a CPU state dict.

    Raises:
        FileNotFoundError: if `path` does not exist.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"weights file {path} does not exist; train a model first")
    return load_file(str(path), device="cpu")
