"""Every place the compiled engine touches torch's private internals, each a no-op on a torch other than
TESTED_TORCH (tests/test_internals.py checks each applies here, or skips). Why each pays: docs/design.md,
"Starting fast"; figures: docs/benchmarks.md, 2026-12-01 (graphs built sooner) and 2026-12-05 (re-measured on 2.11).

    quick_builds()              g++ at -O2, inlining past its size limits, for streamed graphs (torch._inductor.cpp_builder)
    simplify_fewer()            no sympy.simplify of a polynomial index (torch._inductor.codegen.cpp)
    skip_proven_isa_probes()    trust the vector-ISA probes that passed before (torch._inductor.cpu_vec_isa)
    use_cache_dir(folder)       inductor's cache under ours (torch._inductor.runtime.cache_dir_utils)
    configure_dynamo()          one graph per pass, no automatic dynamic shapes (torch._dynamo.config)
    allow_aot_compile()         torch.compile(fn).aot_compile switched on (torch._dynamo.config)
    saved_guard, unmark         which guards a saved graph keeps (torch._dynamo.guards)
    cpu_has_native_bf16()       AVX512-BF16 or AMX (torch.cpu._is_*_supported)
"""
import contextlib
import functools
import hashlib
import json
import os
import threading

import torch

from qwen import environment

TESTED_TORCH = "2.11."                       # the release these touchpoints were written against


def applies():
    """Whether this torch is the release the touchpoints below were written for."""
    return torch.__version__.startswith(TESTED_TORCH)

_chosen = threading.local()                  # .level: this thread's -O level for -O3, or None

# g++ stops inlining into a function past a size (--param large-function-insns, then -growth); inductor puts a
# whole stretch of a layer in one kernel function, and in a verify pass's (2 rows: more code) g++ left the
# vector loads out of line, spilling every accumulator around each call: a 0.8B verify of 2 rows ran 75 ms
# against 61 ms inlined (docs/benchmarks.md, 2026-12-07, ninth session). Without limits it inlines them.
INLINE_WITHOUT_LIMITS = ["-param=large-function-insns=100000", "-param=large-function-growth=10000",
                         "-param=inline-unit-growth=10000"]   # inductor puts a "-" before each; g++ only


def _read_chosen_level():
    """Wrap inductor's choice of optimisation flags (once) so that it reads this thread's level (and inlines
    without limits where a level is chosen): per thread, as the app's other threads build as before
    meanwhile. -> whether the wrapper is in place"""
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
        if not level or "O3" not in cflags:
            return cflags, ldflags
        compiler = args[0] if args else kwargs.get("cpp_compiler", "")
        inline = INLINE_WITHOUT_LIMITS if cpp_builder._is_gcc(compiler) else []      # the params are g++'s
        return [level if flag == "O3" else flag for flag in cflags] + inline, ldflags

    flags.reads_chosen_level = True
    cpp_builder._get_optimization_cflags = flags
    return True


@contextlib.contextmanager
def quick_builds(level="O2"):
    """Within this block, in this thread, inductor builds its C++ at `level` where it would use -O3, and lets
    g++ inline without its size limits (INLINE_WITHOUT_LIMITS)."""
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
    environment.default_for_others("TORCHINDUCTOR_CACHE_DIR", folder, library_default=library_default)


ISA_PROBES_PASSED = "vector-isa-probes-passed.json"    # in the cache folder: see skip_proven_isa_probes
isa_probes = {"compiler": None, "trusted": set(), "passed": set()}   # this process's view of the probes


def _probe_key(compiler, isa, code):
    """A probe: this compiler building this code with this ISA's flags."""
    return hashlib.sha256(f"{compiler}\0{isa.build_arch_flags()}\0{code}".encode()).hexdigest()[:32]


def run_probe(isa, code):
    """Inductor's own probe (cpu_vec_isa.VecISA.check_build as shipped): build `code`, load it in a new
    Python process. Replaced in tests."""
    return run_probe.shipped(isa, code)


def _trust_passed_probes():
    """Wrap inductor's vector-ISA probe (once) so that a probe recorded as passed returns True at once, and
    one that passes now is noted for record_isa_probes. -> whether the wrapper is in place"""
    try:
        from torch._inductor import cpu_vec_isa as isa
        shipped = isa.VecISA.check_build
    except (ImportError, AttributeError):
        return False
    if getattr(shipped, "trusts_passed_probes", False):
        return True

    @functools.wraps(shipped)
    def check_build(self, code):
        key = _probe_key(isa_probes["compiler"], self, code)
        if key in isa_probes["trusted"]:
            return True
        passed = run_probe(self, code)
        if passed:
            isa_probes["passed"].add(key)
        return passed

    run_probe.shipped, check_build.trusts_passed_probes = shipped, True
    isa.VecISA.check_build = check_build
    return True


def skip_proven_isa_probes(folder, compiler):
    """Inductor probes at every start that g++ can build and load code for each vector ISA it may use
    (AVX2, AVX-512, VNNI, AMX, ...): a build and a new Python process each, seconds of a cached start.
    Trust the probes that passed before with this compiler (record_isa_probes); run the others. The CPU's
    own flags and AMX's kernel permission inductor still checks itself."""
    if not applies() or not _trust_passed_probes():
        return
    isa_probes["compiler"] = compiler
    try:
        record = json.load(open(os.path.join(folder, ISA_PROBES_PASSED)))
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and record.get("compiler") == compiler:
        isa_probes["trusted"] |= set(record.get("probes", []))


def record_isa_probes(folder, compiler):
    """After compiling: note in the cache folder the probes that passed here with this compiler."""
    passed = isa_probes["passed"] | isa_probes["trusted"]
    if not applies() or isa_probes["compiler"] != compiler or not isa_probes["passed"] - isa_probes["trusted"]:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ISA_PROBES_PASSED), "w") as f:
        json.dump({"compiler": compiler, "probes": sorted(passed)}, f)


def configure_dynamo():
    """Dynamo's settings for the engine's graphs, set once for the process (they are not per call)."""
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)  # 2 graphs per k
    # T stays static (the delta rule unrolled per T); only the KV capacity is dynamic, where marked
    torch._dynamo.config.automatic_dynamic_shapes = False


def allow_aot_compile():
    """Switch on torch.compile(fn).aot_compile, which saved.py compiles with (off by default in 2.11)."""
    torch._dynamo.config.enable_aot_compile = True


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
