"""Where the model and its KV cache live: the CPU, or a CUDA device this machine has, and
how many bytes each has free for pools before any is made."""

from __future__ import annotations

import torch

from minipaged.memory import free_memory


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``, refused with a ``ValueError`` unless it is the CPU or
    a CUDA device this machine has (torch itself fails with an ``AssertionError`` deep inside
    the first copy)."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:  # torch's message lists every device type
        raise ValueError(f"device {device!r} is not a device name; use 'cpu' or 'cuda'") from error
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r}: CUDA is not available here (torch {torch.__version__}, "
                f"built for CUDA {torch.version.cuda}); use 'cpu'"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA "
                "device(s), numbered from 0"
            )
    elif resolved.type != "cpu":
        raise ValueError(f"device {device!r}: minipaged runs on 'cpu' or 'cuda'")
    return resolved


def free_memory_on(device: torch.device) -> int | None:
    """Bytes free now on ``device`` (a checked one): the CUDA device's free memory, the host's
    for the CPU (``memory.free_memory``); None for ``meta``, which holds no values."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return free_memory() if device.type == "cpu" else None
