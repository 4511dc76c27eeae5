"""Where the model and its KV cache live: the CPU, or a CUDA device this machine has, and
how many bytes each has free for pools before any is made."""

from __future__ import annotations

import torch

from minipaged.memory import check_fits, free_memory


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``, refused with a ``ValueError`` unless it is the CPU or
    a CUDA device this machine has (torch itself fails with an ``AssertionError`` deep inside
    the first copy). ``cpu:N`` is the CPU, as torch places tensors there: the result is then
    ``cpu``, so that it compares equal to every CPU tensor's device."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:  # torch's message lists every device type
        raise ValueError(f"device {device!r} is not a device name; use 'cpu' or 'cuda'") from error
    if isinstance(device, str) and str(resolved) != device:  # torch wrapped a number over 127
        raise ValueError(f"device {device!r}: device numbers go from 0 to 127; use 'cuda:N'")
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
    elif resolved.type == "cpu":
        return torch.device("cpu")
    else:
        raise ValueError(f"device {device!r}: minipaged runs on 'cpu' or 'cuda'")
    return resolved


def check_pools_fit_on(
    device: torch.device, device_pools: tuple[int, str], host_pools: tuple[int, str], fix: str
) -> None:
    """Refuse KV pools that the memory free now cannot hold, before any is allocated
    (``memory.check_fits``). Each pool is ``(bytes, what they are made of)``. The device
    pools live where ``device`` says: on a CUDA device they are checked against its own free
    memory (``torch.cuda.mem_get_info``) and the host (swap) pools against the host's, since
    neither takes the other's memory; on the CPU both live in host memory and are checked
    together; on ``meta`` the device pools hold nothing."""
    device_bytes, device_what = device_pools
    host_bytes, host_what = host_pools
    if device.type == "cuda":
        free_on_device = torch.cuda.mem_get_info(device)[0]
        check_fits(device_bytes, free_on_device, device_what, fix, f" on {device}")
    elif device.type == "cpu":
        host_bytes += device_bytes
        host_what = f"{device_what} + {host_what}"
    check_fits(host_bytes, free_memory(), host_what, fix, " on the host")
