"""Every Numba kernel compiles to PTX for sm_80 and sm_90 and ``ptxas`` assembles it.

The simulator accepts code that real hardware rejects (it has no registers to run out of, and
runs float64 where a GPU would run float32), so this file compiles each kernel with the real
CUDA compiler, with both block reductions, and checks the assembler's report: no spills, and no
``.f64`` instruction in kernels that promise float32. No GPU is needed, only a CUDA toolkit
(libnvvm and ``ptxas`` from the same release).

Each test prints the figures ``ptxas -v`` reports (registers per thread, shared memory per
thread block, stack): ``pytest tests/test_ptx.py -rP`` lists them, for the docs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    pytest.skip(
        "PTX needs Numba's real CUDA compiler, and this process runs the simulator",
        allow_module_level=True,
    )
pytest.importorskip("numba.cuda", reason="compiling the kernels needs numba and numba-cuda")

from numba import cuda
from numba.cuda import dispatcher

from cuda_kernels.block_reduce import REDUCTION, REDUCTIONS
from cuda_kernels.cache_ops import copy_blocks_kernel, reshape_and_cache_kernel
from cuda_kernels.launch import NUM_THREADS
from cuda_kernels.paged_attention import decode_kernel
from cuda_kernels.paged_attention_v2 import partitions_kernel, reduce_kernel

ARCHS = [(8, 0), (9, 0)]

# Argument types as the host wrappers pass them: contiguous float32 tensors, int32 block tables
# and lengths, int64 slot mappings and block pairs; the KV pools either float32 or, for an FP8
# cache, their bytes (uint8) read through a float32 decode table.
F1, F3, F4 = "float32[::1]", "float32[:, :, ::1]", "float32[:, :, :, ::1]"
I2, I1, U4 = "int32[:, ::1]", "int32[::1]", "uint8[:, :, :, ::1]"
POOLS = {"float32": F4, "fp8": U4}
SCALES = f"{F1}, {F1}, {F1}"  # k_scale, v_scale, decode table


def decode_sig(pool: str) -> str:
    return f"void({F3}, {F3}, {pool}, {pool}, {I2}, {I1}, float32, {SCALES})"


def partitions_sig(pool: str) -> str:
    return f"void({F3}, {F3}, {F4}, {F3}, {pool}, {pool}, {I2}, {I1}, float32, int32, {SCALES})"


DECODE_SIG = decode_sig(F4)
ATTENTION = {  # factory(head_dim, num_threads, reduction) -> kernel
    "paged_attention_v1": (decode_kernel, decode_sig),
    "paged_attention_v2_partitions": (partitions_kernel, partitions_sig),
}
OTHERS = {
    "paged_attention_v2_reduce": (reduce_kernel, f"void({F3}, {F3}, {F3}, {F4})"),
    "reshape_and_cache": (reshape_and_cache_kernel, f"void({F3}, {F3}, {F4}, {F4}, int64[::1])"),
    "reshape_and_cache_fp8": (
        reshape_and_cache_kernel,
        "void(uint8[:, :, ::1], uint8[:, :, ::1], " + f"{U4}, {U4}, int64[::1])",
    ),
    "copy_blocks": (copy_blocks_kernel, f"void({F4}, {F4}, int64[:, ::1])"),
    "copy_blocks_fp8": (copy_blocks_kernel, f"void({U4}, {U4}, int64[:, ::1])"),
}


def find_ptxas() -> Path | None:
    """The toolkit's ``ptxas``: under CUDA_HOME (or CUDA_PATH, or /usr/local/cuda), else PATH."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "ptxas").is_file():
            return Path(root) / "bin" / "ptxas"
    found = shutil.which("ptxas")
    return Path(found) if found else None


@pytest.fixture(scope="module")
def ptxas() -> Path:
    path = find_ptxas()
    if path is None:
        pytest.skip("no CUDA toolkit: ptxas is neither under CUDA_HOME nor on PATH")
    try:
        cuda.cudadrv.nvvm.NVVM()
    except Exception as error:  # numba raises several kinds when libnvvm cannot load
        pytest.skip(f"no CUDA toolkit for Numba: libnvvm did not load ({error})")
    return path


@pytest.fixture(scope="module")
def compile_ptx():
    """``compile_ptx(kernel, sig, cc) -> ptx``, compiled once per kernel, signature and target in
    this module: the tests below that read a kernel's PTX for what it holds (warp shuffles, the
    compiler's release) read the PTX the assembler already checked, not a second compile of it.
    A kernel that calls a device function asks the current device for its compute capability;
    without a GPU, answer with the target's."""
    compiled: dict[tuple, str] = {}

    def compile_for(kernel, sig: str, cc: tuple[int, int]) -> str:
        key = (kernel.py_func, sig, cc)
        if key not in compiled:
            fake_device = type("FakeDevice", (), {"compute_capability": cc})()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(dispatcher, "get_current_device", lambda: fake_device)
                compiled[key], _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
        return compiled[key]

    return compile_for


def assemble(ptxas: Path, ptx: str, cc: tuple[int, int], tmp_path: Path) -> dict[str, int]:
    """Run ``ptxas -v`` for ``sm_XY``; return its figures for the (single) kernel."""
    source = tmp_path / "kernel.ptx"
    source.write_text(ptx)
    arch = f"sm_{cc[0]}{cc[1]}"
    result = subprocess.run(
        [str(ptxas), "-v", f"-arch={arch}", str(source), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"ptxas rejected the PTX for {arch}:\n{result.stderr}"
    report = result.stderr
    return {
        "registers": int(re.search(r"Used (\d+) registers", report)[1]),
        "shared_bytes": int(m[1]) if (m := re.search(r"(\d+) bytes smem", report)) else 0,
        "stack_bytes": int(re.search(r"(\d+) bytes stack frame", report)[1]),
        "spill_stores": int(re.search(r"(\d+) bytes spill stores", report)[1]),
        "spill_loads": int(re.search(r"(\d+) bytes spill loads", report)[1]),
    }


def check(ptxas: Path, ptx: str, cc: tuple[int, int], tmp_path: Path) -> dict[str, int]:
    assert not re.search(r"\.f64\b", ptx), "a float64 instruction in a float32 kernel"
    figures = assemble(ptxas, ptx, cc, tmp_path)
    print(f"sm_{cc[0]}{cc[1]}:", ", ".join(f"{name} {value}" for name, value in figures.items()))
    assert figures["spill_stores"] == figures["spill_loads"] == 0, figures
    return figures


# Every kernel, pool, reduction and target at Llama's head_dim of 128, and each kernel once more
# at 32: head_dim sizes only the shared arrays q and acc (the loops over it are not unrolled, so
# registers and spills do not grow with it), and one smaller head_dim per kernel is what shows
# that its shared memory follows head_dim, as the assertion below checks. All 32 combinations
# cost 32 compiles of about a second of CPU each; these cost 18.
ATTENTION_CASES = [
    *(
        (kernel, pool, reduction, 128, cc)
        for kernel in ATTENTION
        for pool in POOLS
        for reduction in REDUCTIONS
        for cc in ARCHS
    ),
    *((kernel, "float32", REDUCTION, 32, (9, 0)) for kernel in ATTENTION),
]


@pytest.mark.parametrize(
    ("kernel", "pool", "reduction", "head_dim", "cc"),
    ATTENTION_CASES,
    ids=[f"{k}-{p}-{r}-{d}-sm_{c[0]}{c[1]}" for k, p, r, d, c in ATTENTION_CASES],
)
def test_attention_kernel_assembles_in_float32_without_spills(
    kernel, pool, reduction, head_dim, cc, ptxas, compile_ptx, tmp_path
):
    factory, sig = ATTENTION[kernel]
    ptx = compile_ptx(factory(head_dim, NUM_THREADS, reduction), sig(POOLS[pool]), cc)
    figures = check(ptxas, ptx, cc, tmp_path)
    # q, acc: head_dim float32 each; probs, blocks, scratch: one 4-byte entry per thread
    assert figures["shared_bytes"] == 4 * (2 * head_dim + 3 * NUM_THREADS)


@pytest.mark.parametrize("cc", ARCHS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
@pytest.mark.parametrize("kernel", OTHERS)
def test_reduce_and_cache_kernels_assemble_without_spills(kernel, cc, ptxas, compile_ptx, tmp_path):
    function, sig = OTHERS[kernel]
    check(ptxas, compile_ptx(function, sig, cc), cc, tmp_path)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_only_the_shuffle_reduction_uses_warp_shuffles(reduction, ptxas, compile_ptx):
    ptx = compile_ptx(decode_kernel(128, NUM_THREADS, reduction), DECODE_SIG, (9, 0))
    assert ("shfl.sync" in ptx) == (reduction == "shuffle")


def test_a_real_gpu_process_uses_warp_shuffles_and_four_warps():
    assert (REDUCTION, NUM_THREADS) == ("shuffle", 128)


def test_ptx_generator_and_ptxas_come_from_the_same_cuda_release(ptxas, compile_ptx):
    """pip's NVVM 13.5 emits PTX that ptxas 13.0 rejects: the two must match."""
    ptx = compile_ptx(reduce_kernel, OTHERS["paged_attention_v2_reduce"][1], (9, 0))
    generator = re.search(r"Cuda compilation tools, release (\d+\.\d+)", ptx)
    version = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True).stdout
    assembler = re.search(r"release (\d+\.\d+)", version)
    assert generator and assembler, (ptx[:300], version)
    assert generator[1] == assembler[1], (
        f"libnvvm is CUDA {generator[1]} but {ptxas} is CUDA {assembler[1]}: point CUDA_HOME at "
        "one toolkit for both"
    )
