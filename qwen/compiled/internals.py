"""Every place the compiled engine touches torch's private internals, each a no-op on a torch other than
TESTED_TORCH (tests/test_internals.py checks each applies here, or skips). Why each pays: docs/design.md,
"Starting fast"; figures: docs/benchmarks.md, 2026-12-01, graphs built sooner.

    quick_builds()              g++ at -O2 for a small model's graphs (torch._inductor.cpp_builder)
    simplify_fewer()            no sympy.simplify of a polynomial index (torch._inductor.codegen.cpp)
    skip_proven_isa_probes()    trust vector-ISA probes that passed before (torch._inductor.cpu_vec_isa)
    use_cache_dir(folder)       inductor's cache under ours (torch._inductor.runtime.cache_dir_utils)
    configure_dynamo()          one graph per pass, no automatic dynamic shapes, aot_compile on (torch._dynamo.config)
    saved_guard, unmark         which guards a saved graph keeps (torch._dynamo.guards)
    cpu_has_native_bf16()       AVX512-BF16 or AMX (torch.cpu._is_*_supported)
"""
import contextlib
import functools
import json
import os
import threading

import torch

from qwen import settings

TESTED_TORCH = "2.11."                       # the release these touchpoints were written against


def applies():
    """Whether this torch is the release the touchpoints below were written for."""
    return torch.__version__.startswith(TESTED_TORCH)

_chosen = threading.local()                  # .level: this thread's -O level for -O3, or None


def _read_chosen_level():
    """Wrap inductor's choice of optimisation flags (once) so that it reads this thread's level: per
    thread, as the app's other threads build as before meanwhile. -> whether the wrapper is in place"""
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
    other function in it (a polynomial, such as 96*x0 + x1 + 3*x2) unchanged instead of sympy.simplify-ing
    it: exact, as the result is only used for its stride in the loop variable. -> whether it is in place"""
    if not applies():
        return False
    try:
        import sympy
        from torch._inductor.codegen import cpp as vectorised
        original = vectorised.simplify_index_in_vec_range
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
    # stride_at_vec_range (and the original's recursion) look this name up in their module at each call
    vectorised.simplify_index_in_vec_range = in_vec_range
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
    """The vector ISAs inductor probes on this CPU (AMX aside), as names; None off x86 or if moved."""
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
    """Where every vector-ISA probe passed before with this compiler (record_isa_probes), make inductor
    trust the CPU's list (cpp.vec_isa_ok) instead of building and running a probe per ISA at every start.
    AMX it still checks itself; a user's TORCHINDUCTOR_VEC_ISA_OK is left as it is."""
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
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)  # 2 graphs per k
    # T stays static (the delta rule unrolled per T); only the KV capacity is dynamic, where marked
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.enable_aot_compile = True      # saved.py: torch.compile(fn).aot_compile (off in 2.11)


def cpu_has_native_bf16():
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), as torch sees it."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:
        return False


# torch 2.11 does not save a graph's mark_dynamic marks, and a loaded graph refuses a marked tensor: saved
# graphs are compiled from marked KV buffers and called with unmarked ones (docs/design.md, graphs saved whole)
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
