"""This host and how it runs a model, decided once at load. What the machine offers the compiled engine: the dtype
to load in, the C++ compiler, free memory, where compiled artefacts live, and the width that separates small from
wide models. How a model runs on it: the strategy of its compiled graphs (choose_strategy), the passes decoding makes
(variants_for), and the HostPlan that sums them up.

    plan = host_plan(model, "float32: a small model on CPU")
    str(plan)          # "cpu · float32 · streamed graphs · 1 thread"
    plan.why           # the dtype's reason, then the strategy's
"""
import ctypes
import enum
import os
import shutil
from dataclasses import dataclass

import torch

from qwen import environment
from qwen.compiled.streamed import stream_dtype


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


def weight_bytes(modules, buffers=False):
    """The bytes of these modules' parameters, and (buffers=True) of their buffers too."""
    return sum(t.numel() * t.element_size() for m in modules
               for t in list(m.parameters()) + (list(m.buffers()) if buffers else []))


def copies_fit(weights, copies, available=None):
    """Whether `copies` more copies of `weights` bytes fit in memory: together they may take half of what is
    available (memory_available(), unless given), the rest left to everything else. The one rule for frozen graphs
    (each packs its own copy: choose_strategy) and compile helpers (each loads one: workers.py). -> (bool, reason)"""
    available = memory_available() if available is None else available
    if available is None:
        return False, "free memory unknown"
    need = weights * copies
    return need <= available // 2, (f"{copies} weight copies need {need / 2**30:.1f} GB, "
                                    f"{available / 2**30:.1f} GB available")


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


class Strategy(enum.Enum):
    """How a host's graphs get their weights (docs/design.md, compiled passes): its value in a few words."""
    STREAMED = "streamed graphs"    # CPU: one copy of each weight (bfloat16 where exact), read in the graphs' own loops
    FROZEN = "frozen graphs"        # CPU: the weights frozen into each graph, packed for its GEMMs
    CUDA = "CUDA graphs"
    AHEAD = "ahead-of-time graphs"  # any device: exported and built into package files (ahead.py); ZeroGPU's way


def choose_strategy(modules, freeze=None, graphs=1, ahead=False):
    """-> (Strategy, why). AHEAD where asked (ahead=True: ZeroGPU, which refuses torch.compile). CUDA on a
    GPU. On CPU, streamed, except frozen where asked (freeze=True) or, with freeze=None, for a wide model (is_wide)
    run in bfloat16 (default_dtype's choice where bfloat16 is native) where `graphs` frozen copies fit in memory:
    there frozen decoded speculatively faster (docs/design.md, frozen weights where bfloat16 is native)."""
    if ahead:
        return Strategy.AHEAD, "built ahead of time, as ZeroGPU allows"
    if next(modules[0].parameters()).device.type == "cuda":
        return Strategy.CUDA, "on a GPU"
    if freeze is not None:
        return (Strategy.FROZEN if freeze else Strategy.STREAMED), "as asked"
    if not is_wide(modules[0]):
        return Strategy.STREAMED, "a small model: streamed graphs are saved whole on disk"
    weights = [m.weight for module in modules for m in module.modules()
               if isinstance(m, torch.nn.Linear) and m.weight is not None]     # None: streamed, released
    if all(stream_dtype(w) == torch.bfloat16 and w.dtype == torch.float32 for w in weights):
        return Strategy.STREAMED, "float32 weights bfloat16 holds exactly: half the bytes, one copy for every graph"
    fits, why = copies_fit(weight_bytes(modules), graphs)     # each frozen graph packs a copy of the weights
    return (Strategy.FROZEN, why) if fits else (Strategy.STREAMED, f"no memory to freeze: {why}")


def variants_for(ks, rollbacks=("select",), one_token=True):
    """The passes decoding with k drafts makes, as (T, keeps step states): one-token decode and
    draft steps (unless one_token=False), and verify / head catch-up of 1+k tokens (verify keeps
    step states for `select`). -> (the main model's, the head's as (T, False))"""
    verify = {1 + int(k) for k in ks}
    keeps = {rollback == "select" for rollback in rollbacks}
    one = {1} if one_token else set()
    return {(T, False) for T in one} | {(T, keep) for T in verify for keep in keeps}, \
        {(T, False) for T in one | verify}


@dataclass(frozen=True)
class HostPlan:
    """How this host runs a model: device, dtype, the compiled graphs' strategy (None: eager), torch's
    threads, and why (the dtype's reason; the strategy's, or why eager)."""
    device: str
    dtype: torch.dtype
    strategy: Strategy | None
    threads: int
    why: str

    def __str__(self):
        how = self.strategy.value if self.strategy is not None else "eager"
        return (f"{self.device} · {str(self.dtype).replace('torch.', '')} · {how} · "
                f"{self.threads} thread{'s' if self.threads != 1 else ''}")


def host_plan(model, dtype_reason="", compile=True, ks=(2,), eager_why="compiling not asked for", ahead=False):
    """The HostPlan for this model (loaded in the dtype it runs in) on this host, with compiling or
    without (then eager_why says why); its strategy is the one compile_model picks for these k (the same
    choose_strategy call). On a GPU the device names it: "cuda (NVIDIA H200)"."""
    weight = model.embed_tokens.weight
    device = weight.device.type
    missing = compiler_missing(device)
    if not compile or missing:
        strategy, why = None, (eager_why if not compile else missing)
    else:
        strategy, why = choose_strategy([model], None, len(variants_for(ks)[0]), ahead)
    if device == "cuda":
        device = f"cuda ({torch.cuda.get_device_name(weight.device)})"
    return HostPlan(device, weight.dtype, strategy, torch.get_num_threads(),
                    "; ".join(part for part in (dtype_reason, why) if part))
