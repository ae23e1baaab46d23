"""What this host offers the compiled engine, decided from the machine alone: the dtype to load in, the C++
compiler, free memory, where compiled artefacts live, and the width that separates small from wide models.
"""
import ctypes
import os
import shutil

import torch

from qwen import environment


def cache_dir():
    """Where compiled artefacts live between runs: a folder per CPU vector capability (inductor's cache is
    not keyed by it, and AVX-512 kernels loaded at AVX2 compute garbage) under $QWEN_COMPILE_CACHE, else
    under ~/.cache/qwen-mtp/inductor."""
    root = environment.read("QWEN_COMPILE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "qwen-mtp",
                                                                 "inductor")
    return os.path.join(root, "cpu-" + torch.backends.cpu.get_cpu_capability().lower())


# The width that parts small models from wide ones (docs/design.md): a small model's step is bound by the cost of
# each operation, a wide one's (the 0.8B: hidden 1024) by reading its weights. So a small model stays float32 on a GPU
# too (default_dtype), compiles each greedy round into one graph (warm_up) and never freezes unasked (choose_strategy);
# a wide one gets max-autotuned GEMMs where frozen, row-invariant streamed graphs (steps.py), no compile helpers
# (workers.py).
WIDE_HIDDEN = 1024


def is_wide(module):
    """Whether a model (or its head) is wide: hidden size >= WIDE_HIDDEN."""
    return module.cfg.hidden_size >= WIDE_HIDDEN


def default_dtype(device="cpu", hidden_size=None):
    """bfloat16 on CUDA, float32 on every CPU; a model narrower than WIDE_HIDDEN stays float32 on a GPU too
    (docs/design.md, why float32 for small models). -> (dtype, reason)

    On CPU a float32 model's compiled graphs still read its weights in bfloat16 where that is exact (a bfloat16
    checkpoint: streamed.py), so the bytes a step reads are bfloat16's, while the arithmetic is float32's, in which
    the graphs are batch invariant: a verify pass's rows equal plain steps bit for bit (tests/test_batch_invariance.py).
    In bfloat16 they are not (a row's logits moved by up to a bfloat16 step), and at a near tie speculative decoding
    then wrote another token than plain decoding (docs/design.md, the same text from every pass)."""
    cuda = torch.device(device).type == "cuda"
    if hidden_size is not None and hidden_size < WIDE_HIDDEN:
        return torch.float32, f"a small model (hidden size {hidden_size}) on {'a GPU' if cuda else 'CPU'}"
    if cuda:
        return torch.bfloat16, "CUDA"
    return torch.float32, (f"CPU {torch.backends.cpu.get_cpu_capability()}: float32 arithmetic, bfloat16 weight "
                           "reads; the same text as plain decoding (bfloat16 passes part from it)")


def cpp_compiler():
    """The C++ compiler inductor will use on CPU ($CXX, else g++, c++ or clang++ on PATH), or None."""
    return environment.read("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def compiler_missing(device="cpu"):
    """Why compiling cannot work here, or None. (Inductor builds C++ on CPU, Triton kernels on CUDA.)"""
    if torch.device(device).type == "cuda":
        return None
    if not cpp_compiler():
        return "no C++ compiler (install g++)"
    return None


def memory_available():
    """Bytes this process may still allocate: the container's limit (cgroup v2) when there is one,
    else the host's MemAvailable. None when neither can be read."""
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        if limit != "max":
            return int(limit) - int(open("/sys/fs/cgroup/memory.current").read())
    except (OSError, ValueError):
        pass
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def release_freed_memory():
    """Give the memory compiling freed back to the operating system: Python's garbage collected, sympy's
    expression cache (inductor's index arithmetic fills it) emptied, and glibc's freed heap pages returned
    (a no-op without glibc)."""
    import gc

    import sympy
    gc.collect()
    sympy.core.cache.clear_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
