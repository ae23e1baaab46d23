"""Two changes to how inductor builds a small model's CPU graphs: they compile sooner, and compute the same.

The embedded model's greedy round graph (compile.compile_round) took about 120 s to compile at AVX2 on
one thread: 53 s of it one g++ run over 690 kB of generated C++, and 15 s sympy.simplify deciding
how each memory access of a vectorised loop moves (its stride). Both are spent on nothing this model
needs:

1. **g++ at -O2 rather than inductor's -O3** (quick_builds). Inductor's kernels are vectorised by hand
   (at::vec), so -O3's extra loop transformations find little to do; they cost time all the same.
   The round's C++ built in 24 s instead of 51 s (-O1: 19 s), and its kernels ran as fast.
   Only for graphs of small models: a wide model's GEMM templates are where -O3 could still pay.

2. **No sympy.simplify of an index that is already a polynomial** (simplify_fewer). For each load and
   store of a vectorised loop, inductor rewrites the index within one vector's range (its FloorDiv and
   ModularIndexing terms of the loop variable become free symbols), simplifies the result, and takes
   its stride in the loop variable. Of the round graph's 1242 indices, 1226 held no such term: plain
   sums of products such as `96*x0 + x1 + 3*x2 + 384`, which simplify returned unchanged, at 10-200 ms
   each. Such an index is now returned as it is. That is exact: the result is only ever used for its
   stride (sizevars.stride_at), which is the same whatever form a polynomial is written in.

    with quick_builds():        # inductor's C++ built at -O2 within this block (saved.SavedGraphs:
        graph = compiled.aot_compile(...)    # around compiling, and loading, each graph)
    simplify_fewer()            # once per process; idempotent

Both reach into torch's internals (torch._inductor.cpp_builder, torch._inductor.sizevars), as of
torch 2.13; where those have moved, each does nothing and compiling simply takes its usual time.
"""
import contextlib
import functools
import threading

_chosen = threading.local()                  # .level: this thread's -O level for -O3, or None


def _read_chosen_level():
    """Wrap inductor's choice of optimisation flags (once) so that it reads this thread's level.
    subtle: per thread, not a swap of the function for the length of a block: the app serves from
    other threads while warm_up compiles, and their graphs must build (and be looked up) as before.
    -> whether the wrapper is in place"""
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
