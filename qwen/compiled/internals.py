"""Every place the compiled engine touches torch's private internals, in one module, for torch 2.13.

Each touchpoint is version-gated (TESTED_TORCH): on another torch it does nothing, and compiling
takes its usual time or its usual path (tests/test_internals.py checks each applies here, or skips).

    quick_builds()              g++ at -O2 for a small model's graphs (torch._inductor.cpp_builder)
    simplify_fewer()            no sympy.simplify of a polynomial index (torch._inductor.sizevars)
    skip_proven_isa_probes()    trust vector-ISA probes that passed before (torch._inductor.cpu_vec_isa)
    use_cache_dir(folder)       inductor's cache under ours (torch._inductor.runtime.cache_dir_utils)
    configure_dynamo()          one graph per pass, no automatic dynamic shapes (torch._dynamo.config)
    saved_guard, unmark         which guards a saved graph keeps (torch._dynamo.guards)
    cpu_has_native_bf16()       AVX512-BF16 or AMX (torch.cpu._is_*_supported)

Two of them make a small model's CPU graphs compile sooner and compute the same (docs/design.md,
compiling a first start sooner; figures in docs/benchmarks.md, 2026-12-01, graphs built sooner):

1. **g++ at -O2 rather than inductor's -O3** (quick_builds). Inductor's kernels are vectorised by hand
   (at::vec), so -O3's extra loop transformations find little to do, yet cost build time. Only for
   graphs of small models: a wide model's GEMM templates are where -O3 could still pay.

2. **No sympy.simplify of an index that is already a polynomial** (simplify_fewer). For each load and
   store of a vectorised loop, inductor rewrites the index within one vector's range (its FloorDiv and
   ModularIndexing terms of the loop variable become free symbols), simplifies the result, and takes
   its stride in the loop variable. Most indices hold no such term: plain sums of products such as
   `96*x0 + x1 + 3*x2 + 384`, which simplify returns unchanged, slowly. Such an index is now returned
   as it is. That is exact: the result is only ever used for its stride (sizevars.stride_at), which is
   the same whatever form a polynomial is written in.

    with quick_builds():        # inductor's C++ built at -O2 within this block (saved.SavedGraphs:
        graph = compiled.aot_compile(...)    # around compiling, and loading, each graph)
    simplify_fewer()            # once per process; idempotent
"""
import contextlib
import functools
import json
import os
import threading

import torch

from qwen import settings

TESTED_TORCH = "2.13."                       # the release these touchpoints were written against


def applies():
    """Whether this torch is the release the touchpoints below were written for."""
    return torch.__version__.startswith(TESTED_TORCH)

_chosen = threading.local()                  # .level: this thread's -O level for -O3, or None


def _read_chosen_level():
    """Wrap inductor's choice of optimisation flags (once) so that it reads this thread's level.
    subtle: per thread, not a swap of the function for the length of a block: the app serves from
    other threads while warm_up compiles, and their graphs must build (and be looked up) as before.
    -> whether the wrapper is in place"""
    if not applies():
        return False
    try:
        from torch._inductor import cpp_builder
        original = cpp_builder._get_optimization_cflags
    except (ImportError, AttributeError):
        return False
    if getattr(original, "reads_chosen_level", False):
        return True

    @functools.wraps(original)
    def flags(*args, **kwargs):
        cflags, ldflags = original(*args, **kwargs)
        level = getattr(_chosen, "level", None)
        return [level if level and flag == "O3" else flag for flag in cflags], ldflags

    flags.reads_chosen_level = True
    cpp_builder._get_optimization_cflags = flags
    return True


@contextlib.contextmanager
def quick_builds(level="O2"):
    """Within this block, in this thread, inductor builds its C++ at `level` where it would use -O3."""
    _read_chosen_level()
    previous = getattr(_chosen, "level", None)
    _chosen.level = level
    try:
        yield
    finally:
        _chosen.level = previous


def simplify_fewer():
    """Make inductor's simplify_index_in_vec_range return an index with no FloorDiv, ModularIndexing or
    other function in it unchanged, instead of running sympy.simplify on it (see the module's docstring).
    -> whether the change is in place"""
    if not applies():
        return False
    try:
        import sympy
        from torch._inductor import sizevars
        original = sizevars.simplify_index_in_vec_range
    except (ImportError, AttributeError):
        return False
    if getattr(original, "polynomials_unchanged", False):
        return True

    @functools.lru_cache
    def in_vec_range(index, var, vec_length):
        if not index.atoms(sympy.Function):      # e.g. 96*x0 + x1 + 3*x2 + 384: a polynomial already
            return index
        return original(index, var, vec_length)

    in_vec_range.polynomials_unchanged, in_vec_range.original = True, original
    # subtle: stride_at_vec_range, which cpp.py imports, looks this name up in sizevars at each call
    # (and the original's own recursion does too), so replacing the module's attribute is enough
    sizevars.simplify_index_in_vec_range = in_vec_range
    return True


def use_cache_dir(folder):
    """Make inductor keep its artefacts in `folder`, unless the user named a folder for it."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        library_default = default_cache_dir()
    except (ImportError, AttributeError):
        library_default = None
    settings.default_for_others("TORCHINDUCTOR_CACHE_DIR", folder, library_default=library_default)


ISA_PROBES_PASSED = "vector-isa-probes-passed.json"    # in the cache folder: see skip_proven_isa_probes


def listed_vector_isas():
    """The vector instruction sets (AVX2, AVX-512, ...) inductor probes on this CPU, AMX aside (which it
    always checks itself), as names; None where inductor's internals moved or the CPU is not x86."""
    try:
        from torch._inductor import cpu_vec_isa as isa
        flags = isa.x86_isa_checker()
        return [str(v) for v in isa.supported_vec_isa_list
                if not isinstance(v, isa.VecAMX) and flags and all(f in flags for f in str(v).split())] or None
    except Exception:
        return None


def passed_vector_isas():
    """Of those, the ones inductor's probes found g++ can build and load code for (probing if not yet)."""
    from torch._inductor import cpu_vec_isa as isa
    return [str(v) for v in isa.valid_vec_isa_list() if not isinstance(v, isa.VecAMX)]


def skip_proven_isa_probes(folder, compiler):
    """Where every vector-ISA probe passed before, with this compiler (record_isa_probes), make inductor
    trust the CPU's list (its cpp.vec_isa_ok). AMX, which needs the kernel's permission, inductor still
    checks itself. A user's TORCHINDUCTOR_VEC_ISA_OK is left as it is.
    subtle: at every start, before its first kernel, inductor builds (on a first start; the builds
    are cached) and loads in a subprocess a test program for each vector instruction set the CPU lists,
    a good part of a small model's cached start (docs/benchmarks.md, 2026-11-30, probes skipped)."""
    if not applies():
        return
    cpp = torch._inductor.config.cpp
    try:
        passed = json.load(open(os.path.join(folder, ISA_PROBES_PASSED)))
    except (OSError, ValueError):
        return
    if cpp.vec_isa_ok is None and passed == {"isas": listed_vector_isas(), "compiler": compiler}:
        cpp.vec_isa_ok = True


def record_isa_probes(folder, compiler):
    """After compiling: note in the cache folder that every vector instruction set probe passed here."""
    listed = listed_vector_isas()
    if listed is None or torch._inductor.config.cpp.vec_isa_ok is not None or passed_vector_isas() != listed:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ISA_PROBES_PASSED), "w") as f:
        json.dump({"isas": listed, "compiler": compiler}, f)


def configure_dynamo():
    """Dynamo's settings for the engine's graphs, set once for the process (they are not per call)."""
    # one graph per (T, keep-step-states): up to 2 per draft length, well within this limit
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # subtle: T must stay static (one graph per T, the delta rule unrolled), so no dimension turns
    # dynamic by itself; only the KV capacity, marked by steps.mark_growing and saved.py, is dynamic.
    torch._dynamo.config.automatic_dynamic_shapes = False


def cpu_has_native_bf16():
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), as torch sees it."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:
        return False


# Dynamo's guards on a tensor's "mark_dynamic" attributes. subtle: torch 2.13 does not save the marks a
# graph was compiled with, so a loaded graph refuses every marked tensor ("_has_dynamo_dim_marking is
# present on runtime tensor but was absent at compile time"). The graphs here are compiled from marked
# KV buffers and called with unmarked ones; the capacity stays a dynamic size either way.
MARK_ATTRS = ("_dynamo_dynamic_indices", "_has_dynamo_dim_marking")
UNSAVED_GUARDS = {"DIMENSION_DYNAMIC_MARKING_GUARD"}


def unmark(tensors):
    for t in tensors:
        for attr in MARK_ATTRS:
            if hasattr(t, attr):
                delattr(t, attr)


def saved_guard(entries):
    """Which guards a saved graph keeps: not globals, not those torch cannot save, not the marks above."""
    from torch._dynamo.guards import CheckFunctionManager
    dropped = set(CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES) | UNSAVED_GUARDS
    return [not (e.is_global or e.guard_type in dropped) for e in entries]
