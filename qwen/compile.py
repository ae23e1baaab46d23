"""Compiled decoding steps (the gpt-fast design, for a hybrid model), and the host-aware defaults.

Eager PyTorch pays twice per decoding step: Python and dispatch for every small operation, and, on
CPUs without native bfloat16, a matmul with 2-5 rows that costs 2-3x one row (the BLAS packs the
weight matrix on every call), so verifying k+1 tokens is not free. A compiled step fixes both: one
fused program per shape, with the weights frozen into it (packed once, so a pass of T rows streams
each weight a single time). Freezing costs a packed copy of the weights per graph, so it is chosen
only where those copies fit in memory (freeze_fits); elsewhere the graphs take the weights as inputs.

Compiling needs static shapes, which cache.py provides: every state buffer keeps its shape and is
written in place; positions are a tensor; the KV capacity is one dynamic dimension. Then each of

    model.step(ids, positions, state)        T = 1 (decode) and T = 1+k (verify), k in ks
    head.run(emb, hidden, positions, cache)  T = 1 (draft) and T = 1+k (the head's catch-up pass)

compiles once per T and is reused for every position. Prefill (long T) stays eager and chunked. For
small models, where a round's separate calls cost more than their arithmetic, the whole greedy round

    mtp.greedy_round(model, head, state, head_cache, ...)   drafts, verify, select, catch-up: one call

compiles too, once per k (compile_round).

    compile_model(model, ks=(2,)); compile_head(head, ks=(2,))    # lazy: compiles on first use
    report = warm_up(model, head, ks=(2,))      # compile now; keep each pass only where it is faster

On CPU a model whose weights dominate a step (hidden >= 1024, the 0.8B) reads them from memory at
every pass, so what its graphs multiply by decides its speed. Where its float32 weights are values
bfloat16 holds exactly (a bf16 checkpoint, as Qwen3.5's are), it compiles like a small model: every
graph reads one shared bfloat16 copy in its own loops (streams_wide_weights): half the bytes, no copy
per graph, graphs saved whole. Otherwise (or asked to freeze) it freezes: it compiles its one-token
passes only where they can be frozen with one more copy of the weights in memory (_one_token_choice),
else they stay eager, which streams each weight once anyway; its eager passes multiply by
oneDNN-packed copies of the weights (pack_for_eager, qwen.linear), which warm_up keeps only where the
decode step measures faster with them (packing_speedup), and frees once the one-token passes run
compiled (_drop_packing_if_compiled).

On CPU: inductor. Models of hidden size >= 1024 that do not stream get max-autotune GEMMs and frozen,
packed weights (where a copy per graph fits); the others stay unfrozen, with each weight stored as the transpose it
is multiplied by eagerly (lay_out_transposed) and, for the graphs, a row-major copy in bfloat16 where
that is exact, which the graphs multiply by in their own fused loops instead of the BLAS
(stream_weights, qwen.linear; QWEN_STREAM_WEIGHTS=0 turns that off), their kernels called from C++
rather than Python (WRAPPER_IN_CPP), and each unfrozen graph is compiled ahead of time and saved whole (saved.py), so a
later start loads it instead of tracing the Python again. On CUDA: CUDA graphs
(mode "reduce-overhead"), with every state buffer marked as a static address so that the graphs may
write it in place (state_buffers); no GPU was at hand to run that path.
When the compiler is missing or fails, or the compiled step is not faster, everything stays eager and
the reason is kept in `model.compiled.status`. warm_up compiles graphs missing on disk in parallel,
handing all but one to helper processes (compile_workers.py); a small model's graphs are built at -O2
and with less sympy work, sooner and computing the same (build_time.py).
"""
import ctypes
import functools
import json
import logging
import os
import shutil
import threading
import time

import torch

from qwen import settings
from qwen.build_time import simplify_fewer
from qwen.cache import AttentionState, State
from qwen.linear import (Linear, pack_weights, packing_missing, plain_weights, stream_dtype, streamed_copy,
                         unpack_weights)
from qwen.saved import SavedGraphs, head_run, model_step, round_of, state_buffers

log = logging.getLogger("qwen.compile")


def cache_dir():
    """Where compiled artefacts live between runs: a folder per CPU vector capability under
    $QWEN_COMPILE_CACHE, else under ~/.cache/qwen-mtp/inductor.
    subtle: inductor's cache is not keyed by the vector ISA; kernels built for AVX-512 and loaded by a
    process running at AVX2 (ATEN_CPU_CAPABILITY, or a cache copied to another host) compute garbage."""
    root = settings.read("QWEN_COMPILE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "qwen-mtp",
                                                                 "inductor")
    return os.path.join(root, "cpu-" + torch.backends.cpu.get_cpu_capability().lower())


BF16_MIN_HIDDEN = 1024       # on CPU, narrower models stay float32 (default_dtype)


def default_dtype(device="cpu", hidden_size=None):
    """bfloat16 where the hardware multiplies it natively (CUDA; a CPU with AVX512-BF16 or AMX that torch
    uses), else float32: elsewhere a bfloat16 matmul of a few rows runs several times slower. On CPU a
    model narrower than BF16_MIN_HIDDEN stays float32 anyway: its steps are bound by the cost of each
    operation, not by reading weights, and bfloat16 only adds conversions (the embedded model, compiled,
    on an AMX host: float32 decoded 1.3-2.1x faster, and speculative decoding stayed token-identical,
    which bfloat16's rounding does not promise). -> (dtype, reason)"""
    if torch.device(device).type == "cuda":
        return torch.bfloat16, "CUDA"
    if hidden_size is not None and hidden_size < BF16_MIN_HIDDEN:
        return torch.float32, f"a small model (hidden size {hidden_size}) on CPU"
    capability = torch.backends.cpu.get_cpu_capability()
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if native and capability.startswith("AVX512"):
        return torch.bfloat16, f"CPU {capability} with native bfloat16"
    return torch.float32, f"CPU {capability} without native bfloat16"


def cpp_compiler():
    """The C++ compiler inductor will use on CPU ($CXX, else g++, c++ or clang++ on PATH), or None."""
    return settings.read("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def compiler_missing(device="cpu"):
    """Why compiling cannot work here, or None. (Inductor builds C++ on CPU, Triton kernels on CUDA.)"""
    if torch.device(device).type == "cuda":
        return None
    if not cpp_compiler():
        return "no C++ compiler (install g++)"
    return None


def dense(x):
    """x with standard strides. subtle: a compiled step is guarded on its inputs' strides, and a slice
    such as ids[:, :1] of a (1, 32) tensor has stride (32, 1) where a fresh (1, 1) one has (1, 1)."""
    return x.clone(memory_format=torch.contiguous_format)


class CompiledSteps:
    """A compiled function and the passes it serves, as (T tokens, keeps step states) pairs; any
    other pass runs eagerly (compiling every T a caller might use would cost minutes each)."""

    def __init__(self, fn, variants, kind="model"):
        self.fn, self.variants, self.kind = fn, set(variants), kind     # kind: "model", "head" or "round"
        self.enabled = True
        self.frozen, self.freeze_reason = False, ""   # weights baked into each graph (see _compile)
        self.status = "compiles on first use"   # warm_up: -> "compiling" -> "compiled" or "eager: <reason>"
        self.warming_thread = None               # while warm_up compiles, only its thread uses the compiled steps
        self.eager_passes = {}                   # (T, keep) -> why that pass runs eagerly (drop)
        self.ready = set()                       # passes warm_up compiled, checked and kept: every thread's

    def lookup(self, T, keep=False):
        """-> the compiled pass of T tokens (keeping step states or not) as a function, or None (eager)."""
        if not self.enabled or (T, keep) not in self.variants:
            return None
        if self.warming_thread is not None and (T, keep) not in self.ready \
                and self.warming_thread != threading.get_ident():
            return None                          # others stay eager meanwhile instead of compiling too
        return functools.partial(self.call, (T, keep))

    def call(self, variant, *args):
        """The compiled function's result, or None (and eager from now on) if it fails to compile."""
        try:
            return self.fn(variant, *args)
        except Exception as e:                   # compiling happens on a call; it fails before running
            if self.warming_thread == threading.get_ident():
                raise
            self.disable(f"compiling failed ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]})")
            return None

    def disable(self, reason, level=logging.WARNING):
        self.enabled, self.status = False, f"eager: {reason}"
        log.log(level, "compiled steps off: %s", reason)

    def drop(self, variant, reason):
        """Run one pass, (T, keeps step states), eagerly from now on; the others stay compiled."""
        self.variants.discard(variant)
        self.eager_passes[variant] = reason
        log.info("pass %s stays eager: %s", variant, reason)
        if not self.variants:
            self.disable(reason, logging.INFO)


AUTOTUNE_HIDDEN = 1024       # models this wide get max-autotune GEMMs; smaller ones are all overhead

# Where a step is all overhead (small models on CPU), the code that calls a graph's kernels is C++
# rather than Python, and does not re-check the shapes its guards already checked. Inductor's Python
# wrapper spends per call what a 4M-parameter model's arithmetic costs: one `reinterpret_tensor` per
# view (about 290 a decode step of the embedded model) and one `assert_size_stride` per tensor (128).
# Embedded model at AVX2, one thread, the decode step: 2.13 ms against 2.67 ms with the Python wrapper
# (2.49 ms with the asserts off alone); compiling the step takes 35 s instead of 25.
# The small-model CPU graphs: kernels called from C++, and (realize_opcount_threshold) every input of
# a streamed Linear computed once into a buffer.
# subtle: inductor otherwise inlines a cheap producer, such as the RMSNorm before a projection, into
# each of the layer's dot products (qwen.linear): the output layer then renormalised its input 8192
# times a pass, and a verify pass cost more than plain decoding gained.
WRAPPER_IN_CPP = dict(cpp_wrapper=True, size_asserts=False, realize_opcount_threshold=4)


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


def freeze_fits(modules, graphs, available=None):
    """Whether freezing `graphs` graphs over these modules' weights fits in memory: each frozen graph
    holds its own packed copy of the weights, and we allow them half of what is available.
    -> (bool, reason)"""
    weights = sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
    available = memory_available() if available is None else available
    if available is None:
        return False, "free memory unknown"
    need = weights * graphs
    verdict = need <= available // 2
    return verdict, (f"{graphs} packed weight copies need {need / 2**30:.1f} GB, "
                     f"{available / 2**30:.1f} GB available")


def use_cache_dir():
    """Make inductor keep its artefacts in cache_dir(), unless the user named a folder for it."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    settings.default_for_others("TORCHINDUCTOR_CACHE_DIR", cache_dir(), library_default=default_cache_dir())


ISA_PROBES_PASSED = "vector-isa-probes-passed.json"    # in cache_dir(): see skip_proven_isa_probes


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


def skip_proven_isa_probes():
    """subtle: at every start, before its first kernel, inductor builds (on a first start; the builds
    are cached) and loads in a subprocess a test program for each vector instruction set the CPU lists.
    That was about 2 s of the embedded model's 7 s cached start (an AMX Xeon lists five), 20 s of a
    first start. Where every probe passed before, with this compiler (record_isa_probes), later starts
    trust the CPU's list (inductor's cpp.vec_isa_ok). AMX, which needs the kernel's permission, inductor
    still checks itself. A user's TORCHINDUCTOR_VEC_ISA_OK is left as it is."""
    cpp = torch._inductor.config.cpp
    try:
        passed = json.load(open(os.path.join(cache_dir(), ISA_PROBES_PASSED)))
    except (OSError, ValueError):
        return
    if cpp.vec_isa_ok is None and passed == {"isas": listed_vector_isas(), "compiler": cpp_compiler()}:
        cpp.vec_isa_ok = True


def record_isa_probes():
    """After compiling: note in the cache folder that every vector instruction set probe passed here."""
    listed = listed_vector_isas()
    if listed is None or torch._inductor.config.cpp.vec_isa_ok is not None or passed_vector_isas() != listed:
        return
    os.makedirs(cache_dir(), exist_ok=True)
    with open(os.path.join(cache_dir(), ISA_PROBES_PASSED), "w") as f:
        json.dump({"isas": listed, "compiler": cpp_compiler()}, f)


def _compile(fn, owners, kind, device, autotune=True, freeze=False):
    """fn(*owners, *args) compiled, as a function of (pass, *args): on CPU with the weights as inputs,
    saved whole on disk (saved.py); frozen, or on CUDA, through dynamo, which picks the graph per pass."""
    use_cache_dir()
    if torch.device(device).type == "cpu":
        skip_proven_isa_probes()
    # one graph per (T, keep-step-states): up to 2 per draft length, well within this limit
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # subtle: T must stay static (one graph per T, the delta rule unrolled), so no dimension turns
    # dynamic by itself; only the KV capacity, marked by cache.mark_growing, is dynamic.
    torch._dynamo.config.automatic_dynamic_shapes = False
    if torch.device(device).type == "cuda":
        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)

        def on_cuda(variant, *args):
            # subtle: a CUDA graph may write in place only into inputs whose address stays put (weights,
            # and tensors marked so); every pass writes its state, which without the mark would make
            # inductor skip CUDA graphs for every graph ("skipping cudagraphs due to mutated inputs")
            for t in state_buffers(args):
                torch._dynamo.mark_static_address(t)
            return compiled(*owners, *args)
        return on_cuda
    # max-autotune times a C++ micro-GEMM against ATen's; it costs seconds per matmul shape to decide,
    # worth it only where weights dominate a step (not on the 4M embedded model).
    options = dict(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN") if autotune else dict(WRAPPER_IN_CPP)
    simplify_fewer()                             # exact, and 15 s less of the round graph's compile
    if not freeze:
        # a small model's C++ at -O2: built in half the time, as fast (build_time)
        return SavedGraphs(fn, owners, kind, os.path.join(cache_dir(), "graphs"), options, quick_build=not autotune)
    compiled = torch.compile(fn, fullgraph=True, options=options)

    # freezing: the weights become constants of the graph, packed once for its GEMMs, so a pass of
    # T rows streams each weight once (unfrozen, the BLAS repacks it per call: on an AVX2 CPU,
    # verifying 2-4 tokens then costs 2-3 steps). The price is a packed copy per graph.
    # A small model (no autotuning), frozen only when asked (_freeze_choice), keeps its weights
    # unpacked: MKL's packed GEMM costs ~20-40 us a call on tiny matrices (embedded model at AVX2:
    # speculative 0.80x compiled plain packed, 0.98x unpacked).
    config = dict(freezing=True) if autotune else {"freezing": True, "cpp.weight_prepack": False}

    def frozen(variant, *args):
        # subtle: in torch 2.13 {"freezing": True} as a torch.compile option is silently not applied;
        # the config must be set while the graph compiles, which happens inside the call.
        with torch._inductor.config.patch(config):
            return compiled(*owners, *args)
    return frozen


def variants_for(ks, rollbacks=("select",), one_token=True):
    """The passes decoding with k drafts makes, as (T, keeps step states): one-token decode and
    draft steps (unless one_token=False), and verify / head catch-up of 1+k tokens (verify keeps
    step states for `select`). -> (the main model's, the head's as (T, False))"""
    verify = {1 + int(k) for k in ks}
    keeps = {rollback == "select" for rollback in rollbacks}
    one = {1} if one_token else set()
    return {(T, False) for T in one} | {(T, keep) for T in verify for keep in keeps}, \
        {(T, False) for T in one | verify}


def compiles_one_token_passes(module):
    """Whether one-token passes (decode, draft) may compile at all for this model: always, except on CPU
    for a model whose weights dominate a step (hidden >= AUTOTUNE_HIDDEN) and are not streamed
    (streams_wide_weights). There they compile only frozen, where one more packed copy of the weights
    fits (_one_token_choice): unfrozen through the BLAS, a one-token step streams each weight once
    eagerly already, and compiled it measured 0.85-0.93x eager at the 0.8B shape; frozen, 1.59-1.83x the
    step with packed eager weights on an AMD EPYC host at AVX2 (README, compiled one-token passes).
    Streamed in bfloat16, the decode step reads half the bytes: 3.7x eager (README)."""
    device = next(module.parameters()).device
    streamed = any(getattr(m, "streamed", None) is not None for m in module.modules())
    return device.type == "cuda" or module.cfg.hidden_size < AUTOTUNE_HIDDEN or streamed


def _one_token_choice(modules, several, frozen):
    """For a model where compiles_one_token_passes is False: compile its one-token pass too? Only when
    the passes of several tokens (`several` graphs) are frozen and one more frozen copy of the weights
    fits in memory (freeze_fits). -> (compile it?, why)"""
    if compiles_one_token_passes(modules[0]):
        return True, ""
    if not frozen:
        return False, "a wide model's one-token step gains only from frozen weights, and these are not frozen"
    fits, why = freeze_fits(modules, several + 1)
    return fits, why if fits else f"no memory for one more frozen copy of the weights ({why})"


def _freeze_choice(freeze, modules, graphs, device):
    """-> (freeze?, why): as asked, or, when freeze is None, on CPU for a model wide enough to gain
    from packed weights (hidden >= AUTOTUNE_HIDDEN), where the copies fit in memory.
    subtle: a small model's graphs stay unfrozen. Frozen, AOTAutograd's work is never cached on disk
    ("Cannot cache a graph with freezing enabled"), so every start redoes it; the embedded model's
    five graphs at AVX2 took 48 s from the cache frozen, 20 s unfrozen (194 s and 173 s first), and
    ran as fast either way (the same generation timed in one process: 110 and 112 ms). Unfrozen graphs
    are also saved whole (saved.py): 8 s from the cache."""
    if freeze is not None:
        return bool(freeze), "as asked"
    if torch.device(device).type == "cuda":
        return False, "CUDA graphs instead"
    if modules[0].cfg.hidden_size < AUTOTUNE_HIDDEN:
        return False, "a small model: unfrozen graphs are as fast, and saved whole on disk"
    fits, why = freeze_fits(modules, graphs)
    log.info("%s the weights: %s", "freezing" if fits else "not freezing", why)
    return fits, why


def compile_model(model, ks=(2,), rollbacks=("select",), freeze=None):
    """Prepare compiled main-model steps (compiled on first use). freeze=None freezes the weights
    when a copy per graph fits in memory (freeze_fits). -> CompiledSteps"""
    model.compiled = _prepare([model], model_step, variants_for(ks, rollbacks)[0], freeze, "model")
    return model.compiled


def compile_head(head, ks=(2,), freeze=None, lm_head=None):
    """Prepare compiled MTP head passes for T = 1 and 1+k. lm_head: the main model's output layer; a
    head without a draft vocabulary (it scores every token) then scores in its graphs from that layer's
    streamed copy, shared, where both stream (share_output_rows). -> CompiledSteps"""
    head.compiled = _prepare([head], head_run, variants_for(ks)[1], freeze, "head")
    if lm_head is not None:
        share_output_rows(head, lm_head)
    return head.compiled


def share_output_rows(head, lm_head):
    """Where the head streams its weights and scores every token, its graphs score the draft from the
    output layer's own streamed rows (the same tensor: no copy). At the 0.8B width that is 248320 rows,
    0.5 GB in bfloat16 a guess, against 1 GB of float32 through the BLAS eagerly."""
    streams = head.fc.streamed is not None and getattr(lm_head, "streamed", None) is not None
    if head.draft_vocab is None and streams:
        head.draft_streamed = lm_head.streamed


FUSE_HIDDEN = 1024           # models narrower than this compile each greedy round into one graph


def compile_round(model, head, ks=(2,), freeze=None):
    """Prepare the whole greedy `select` round (mtp.greedy_round: drafts, verify, select, the head's
    catch-up) as one compiled graph per k, kept in head.round_compiled. On a small model a round of
    separate calls (a head pass per draft, the verify pass, the Python between) pays the overhead of
    each; as one call it ran about 1.2x faster (README, benchmarks). -> CompiledSteps"""
    head.round_compiled = _prepare([model, head], round_of, {(1 + int(k), True) for k in ks}, freeze, "round")
    return head.round_compiled


def lay_out_transposed(modules):
    """Store every Linear weight W (out, in) as the contiguous transpose it is multiplied by: the
    values and shape stay, only the memory order changes (strides (1, in)). Idempotent; a tied
    weight (lm_head = embed_tokens) is laid out once.
    subtle: a Linear computes x @ W.T. With W row-major that is MKL's "NT" GEMM, which for 2-4 rows
    of a small matrix costs 3-4 times one row at AVX2 (704x192, 3 rows: 52 us against 14); with W.T
    contiguous it is an "NN" GEMM streaming the weight once (17 us against 10). For the embedded model,
    compiled: verifying 3 tokens 1.24 steps instead of 1.56, speculative decoding 1.1-1.4x plain
    instead of 0.8-1.3x. (Large models freeze packed weights, where the layout does not matter.)"""
    for module in modules:
        for linear in module.modules():
            w = linear.weight if isinstance(linear, torch.nn.Linear) else None
            if w is not None and w.dim() == 2 and w.stride() == (w.shape[1], 1) and w.shape[1] > 1:
                w.data = w.data.t().contiguous().t()


def stream_weights(modules):
    """Give every Linear of these modules (and a head's draft vocabulary) the weight copy that compiled
    graphs multiply by (qwen.linear): row-major, in bfloat16 where that is exact. Eager passes keep
    using the float32 weights. Idempotent. -> the copies' dtypes, e.g. {torch.bfloat16}"""
    dtypes = set()
    for module in modules:
        for linear in module.modules():
            if isinstance(linear, Linear):
                if linear.streamed is None:
                    linear.streamed = streamed_copy(linear.weight)
                dtypes.add(linear.streamed.dtype)
        if getattr(module, "draft_weight", None) is not None and module.draft_streamed is None:
            module.draft_streamed = streamed_copy(module.draft_weight.T)
    return dtypes


def pack_for_eager(modules):
    """A wide model's eager passes on CPU (its one-token steps, prefill, and any pass not compiled)
    multiply by oneDNN-packed weights (qwen.linear.pack_weights) where the copy fits in half of the
    memory available. warm_up later keeps them only where the decode step is faster with them.
    QWEN_PACK_WEIGHTS=0 turns this off. -> bytes packed (0 when not)"""
    if settings.read("QWEN_PACK_WEIGHTS", "1") == "0":
        return 0
    missing = packing_missing()
    if missing:
        log.info("eager passes keep the BLAS: %s", missing)
        return 0
    need = sum(m.weight.numel() * m.weight.element_size() for module in modules for m in module.modules()
               if isinstance(m, Linear) and m.packed is None and m.weight.dtype == torch.float32)
    available = memory_available()
    if need and (available is None or need > available // 2):
        log.info("eager passes keep the BLAS: packed weights need %.1f GB, %s available", need / 2**30,
                 "unknown" if available is None else f"{available / 2**30:.1f} GB")
        return 0
    return pack_weights(modules)


def packing_speedup(model, ids, repeats=5):
    """The eager decode step (one token after a prefill of ids) with the BLAS ÷ with packed weights,
    timed alternately on the same state and position. -> seconds plain / seconds packed
    subtle: compiled steps are off meanwhile; else a compiled one-token graph (which reads the plain
    weights either way) would stand in for both sides, or compile mid-measurement."""
    state, context = State(model), ids.shape[1]
    enabled = model.compiled is not None and model.compiled.enabled
    if enabled:
        model.compiled.enabled = False
    try:
        model.hidden(ids, state)

        def step():
            state.pos = context
            model.forward(ids[:, :1], state)

        def plain_step():
            with plain_weights():
                step()
        plain, packed = _time_both(plain_step, step, repeats)
    finally:
        if enabled:
            model.compiled.enabled = True
    return plain / packed


def streams_wide_weights(modules, freeze):
    """Whether a wide model (hidden >= AUTOTUNE_HIDDEN) on CPU compiles like a small one: unfrozen, its
    graphs multiplying by one bfloat16 copy of the weights in their own loops (stream_weights), shared by
    every graph, instead of a packed float32 copy frozen into each. Only for float32 weights that
    bfloat16 holds exactly (a bf16 checkpoint, as Qwen3.5's are, loaded as float32), unless freezing
    was asked for or QWEN_STREAM_WEIGHTS=0. -> (stream?, why)
    subtle: a wide model's step reads its weights from memory, so half the bytes is most of the gain. The
    0.8B shape at AVX2 (README, streamed weights for a wide model): decode step 48.5 ms against 111 ms
    frozen, peak memory 6.0 GB against 21.9 (k=1); plain decoding 4.5x eager. The price: a verify pass
    of several rows costs more steps than frozen (2 tokens 1.7-1.9 steps; frozen 1.1)."""
    device = next(modules[0].parameters()).device
    if device.type != "cpu" or modules[0].cfg.hidden_size < AUTOTUNE_HIDDEN:
        return False, ""
    if freeze:
        return False, "freezing was asked for"
    if settings.read("QWEN_STREAM_WEIGHTS", "1") == "0":
        return False, "QWEN_STREAM_WEIGHTS=0"
    linears = [m.weight for module in modules for m in module.modules() if isinstance(m, Linear)]
    if any(w.dtype != torch.float32 or stream_dtype(w) != torch.bfloat16 for w in linears):
        return False, "the weights are not float32 values that bfloat16 holds exactly"
    return True, "weights streamed in bfloat16 by the graphs' own loops, one copy shared by every graph"


def _prepare(modules, fn, variants, freeze, kind):
    """The CompiledSteps of fn over these modules, for these passes (T, keep): the weights laid out,
    packed or streamed for this host, frozen or not (_freeze_choice), and a wide CPU model's one-token
    pass left eager where it cannot be frozen (_one_token_choice)."""
    device = next(modules[0].parameters()).device
    streams_wide, stream_why = streams_wide_weights(modules, freeze)
    autotune = modules[0].cfg.hidden_size >= AUTOTUNE_HIDDEN and not streams_wide
    if device.type == "cpu" and autotune:
        with torch.inference_mode(False):
            pack_for_eager(modules)          # first: freezing then counts the memory the copies take
    several = {v for v in variants if v[0] > 1}
    freeze, why = (False, stream_why) if streams_wide else _freeze_choice(freeze, modules, len(several), device)
    # subtle: a graph's guards check the kind of each weight tensor; made under inference_mode (warm_up)
    # they would be inference tensors, and a graph saved by another process, where they are not, misses
    with torch.inference_mode(False):
        if device.type == "cpu" and not autotune:
            lay_out_transposed(modules)
        if device.type == "cpu" and not autotune and not freeze and settings.read("QWEN_STREAM_WEIGHTS", "1") != "0":
            stream_weights(modules)
    one_token, one_why = _one_token_choice(modules, len(several), freeze)
    eager = {v: one_why for v in variants - several} if not one_token else {}
    steps = CompiledSteps(_compile(fn, modules, kind, device, autotune, freeze), set(variants) - set(eager), kind)
    steps.frozen, steps.freeze_reason, steps.eager_passes = freeze, why, eager
    if eager:
        log.info("the %s's one-token pass stays eager: %s", kind, one_why)
    missing = compiler_missing(device)
    if missing:
        steps.disable(missing)
    return steps


def _time_both(a, b, repeats=15):
    """Median seconds of a() and of b(), run alternately so that a busy moment of the machine (these
    hosts are noisy) falls on both. -> (seconds of a, seconds of b)"""
    times = ([], [])
    for _ in range(repeats):
        for fn, out in zip((a, b), times):
            t = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t)
    return tuple(sorted(ts)[len(ts) // 2] for ts in times)


@torch.inference_mode()
def warm_up(model, head=None, ks=(2,), rollbacks=("select",), context=32, keep_if_faster=True, freeze=None,
            only_greedy=False):
    """Compile every pass decoding with these k and rollbacks makes, now (later runs load from the disk
    cache), check each against eager, time it against eager, and keep it only where it is faster.
    A small model (hidden < FUSE_HIDDEN) with `select` also gets each greedy round as one graph; then
    the decode step and the round graphs come first (all that plain and greedy speculative decoding
    need), and the step graphs the trace, sampling and `recompute` use follow (unless only_greedy:
    a caller that will not sample or trace skips them, and they run eagerly).
    -> {"status", "seconds" (compiling), "ready_seconds" (until the first passes served), "speedups"
    {pass: eager / compiled}, "step_speedup" (the decode step's, or None), "packed_weights_dropped" (a
    wide model's packed eager copies freed, its one-token passes compiled: _drop_packing_if_compiled)}.
    Other threads run eagerly each pass that is not ready yet (the app serves while it compiles)."""
    if model.compiled is None:
        compile_model(model, ks, rollbacks, freeze)
    if head is not None and head.compiled is None:
        compile_head(head, ks, freeze, model.lm_head)
    if head is not None and head.round_compiled is None and "select" in rollbacks \
            and model.cfg.hidden_size < FUSE_HIDDEN:
        compile_round(model, head, ks, freeze)
    steps = [model.compiled] + ([head.compiled] if head is not None else []) + \
        ([head.round_compiled] if head is not None and head.round_compiled is not None else [])
    report = {"status": model.compiled.status, "seconds": 0.0, "ready_seconds": None, "speedups": {},
              "step_speedup": None, "packed_weights_dropped": False}
    _keep_packing_if_faster(model, head, report, context, keep_if_faster)
    if not model.compiled.enabled:
        return report
    for compiled in steps:
        compiled.status, compiled.warming_thread = "compiling", threading.get_ident()
    t0 = time.perf_counter()
    try:
        phases = _phases(model, head)
        skipped = [p for phase in phases[1:] for p in phase] if only_greedy else []
        phases = phases[:1] if only_greedy else phases
        for i, passes in enumerate(phases):
            later = phases[i + 1] if i + 1 < len(phases) else []
            if not _warm_up(model, head, steps, passes, report, context, keep_if_faster, later):
                break
            report["ready_seconds"] = report["ready_seconds"] or time.perf_counter() - t0
    finally:
        for compiled in steps:
            compiled.warming_thread = None
    # subtle: a skipped pass stays eager rather than compile on first use: a prompt as long as one of
    # them (a 3-token prompt prefilling the head, k=2) would otherwise stall the generation to compile
    # it (the command line's first run: 64 tokens in 11 s instead of 0.1 s)
    for part, variant in skipped:
        if part.enabled and variant not in part.ready:
            part.drop(variant, "not warmed up (only greedy decoding was asked for)")
    report["status"] = model.compiled.status
    report["packed_weights_dropped"] = _drop_packing_if_compiled(model, head)
    if report["status"] == "compiled" and model.embed_tokens.weight.device.type == "cpu":
        try:
            record_isa_probes()
        except OSError:                             # a read-only cache: the probes simply run again
            pass
    release_freed_memory()
    log.info("warm-up: %s in %.1f s, eager / compiled: %s", report["status"], report["seconds"],
             ", ".join(f"{name} {x:.2f}x" for name, x in report["speedups"].items()))
    return report


def _keep_packing_if_faster(model, head, report, context, keep_if_faster):
    """Where pack_for_eager packed the weights, time the eager decode step with and without them;
    keep them only where it is faster (else their memory is freed)."""
    modules = [m for m in (model, head) if m is not None]
    if not any(getattr(linear, "packed", None) is not None for m in modules for linear in m.modules()):
        return
    speedup = packing_speedup(model, warm_up_ids(model, context))
    report["speedups"]["eager decode step, packed weights"] = speedup
    if keep_if_faster and speedup <= 1:
        unpack_weights(modules)
        log.info("packed weights dropped: the eager decode step is not faster with them here (%.2fx)", speedup)


def _drop_packing_if_compiled(model, head):
    """Once the one-token passes run compiled (the decode step, and the head's draft pass), packed eager
    copies serve only prefill and `recompute`'s re-runs: free them (a copy of every weight, 3 GB at the
    0.8B shape in float32). -> whether they were dropped"""
    modules = [m for m in (model, head) if m is not None]
    if not any(getattr(linear, "packed", None) is not None for m in modules for linear in m.modules()):
        return False
    if any(m.compiled is None or (1, False) not in m.compiled.ready or not m.compiled.enabled for m in modules):
        return False
    unpack_weights(modules)
    log.info("packed weights dropped: the one-token passes run compiled")
    return True


def release_freed_memory():
    """Give the memory compiling allocated and freed back to the operating system. glibc's allocator
    keeps freed heap pages for reuse: after the 0.8B shape's verify graph compiled, 0.36 GB of them
    (resident 6.96 -> 6.60 GB). Nothing happens where there is no glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _phases(model, head):
    """The passes to warm up, in order, as lists of (CompiledSteps, (T, keep)). When round graphs serve
    greedy `select` decoding, they and the decode step come first; the step graphs they stand in
    for (the trace's, sampling's, `recompute`'s) after."""
    passes = [(model.compiled, v) for v in sorted(model.compiled.variants)]
    passes += [(head.compiled, v) for v in sorted(head.compiled.variants)] if head is not None else []
    rounds = head.round_compiled if head is not None else None
    if rounds is None or not rounds.enabled:
        return [passes]
    first = [(model.compiled, v) for v in sorted(model.compiled.variants) if v == (1, False)]
    first += [(rounds, v) for v in sorted(rounds.variants)]
    return [first, [p for p in passes if p not in first]]


def warm_up_ids(model, context):
    """The prompt warm-up passes run on: (1, context) token ids."""
    device = model.embed_tokens.weight.device
    return torch.arange(1, context + 1, device=device)[None] % model.cfg.vocab_size


def _run_pass(model, head, part, variant, ids):
    """Make one pass of `part` (a model's, head's or round's CompiledSteps) the way decoding does,
    after a prefill of ids: the first such call compiles its graph (or loads it from disk)."""
    from qwen.cache import keep_step_states
    from qwen.mtp import generate_mtp
    T, keep = variant
    context = ids.shape[1]
    if part.kind == "model":
        state = State(model)
        model.hidden(ids, state)
        keep_step_states(state, T, on=keep)
        model.forward(ids[:, :T], state)
    elif part.kind == "head":
        hidden = torch.zeros(1, context, model.cfg.hidden_size, dtype=model.embed_tokens.weight.dtype,
                             device=ids.device)
        cache = AttentionState()
        head(model.embed_tokens(ids), hidden, 0, cache)
        head(model.embed_tokens(ids[:, :T]), hidden[:, :T], context, cache)
    else:
        generate_mtp(model, head, ids[:, :8], max_new_tokens=2 * T, k=T - 1)        # compiles round k


def _warm_up(model, head, steps, passes, report, context, keep_if_faster, later=()):
    """Compile these passes (the graphs missing on disk in parallel: compile_workers), check and time
    each against eager, keep the faster ones and make them ready for every thread. -> False when
    compiling failed or a pass computed something else (then everything is eager, with the reason in
    the status). `later`: the next phase's passes; while helpers compile, this process compiles the
    first of them that is missing, ahead, instead of waiting (the embedded model at AVX2: the decode
    step 39 s here and then the verify pass 70 s, beside the round graph's 97 s in a helper)."""
    from qwen import compile_workers
    ids = warm_up_ids(model, context)                                                  # (1, context)
    t0 = time.perf_counter()
    helpers = compile_workers.start(model, head, passes, context)
    try:
        # the passes no helper compiles first (compiled here meanwhile), then the helpers' (loaded)
        ours = [p for p in passes if p not in helpers.handed_off]
        ahead = compile_workers.missing(later)[:1] if helpers.handed_off else []
        for part, variant in ours + ahead:
            _run_pass(model, head, part, variant, ids)
        helpers.wait()
        for part, variant in helpers.handed_off:
            _run_pass(model, head, part, variant, ids)
    except Exception as e:                      # a compiler that fails here would fail for the user: go eager
        helpers.wait()
        first_line = (str(e).splitlines() or [""])[0][:200]
        for compiled in steps:
            compiled.disable(f"compiling failed ({type(e).__name__}: {first_line})")
        report["seconds"] += time.perf_counter() - t0
        return False
    report["seconds"] += time.perf_counter() - t0
    wrong = _disagreement(model, head, ids, passes)
    if wrong:                                   # a miscompiled step must never reach a user
        for compiled in steps:
            compiled.disable(f"the compiled {wrong} disagrees with eager")
        return False
    rounds = [(part, v) for part, v in passes if part.kind == "round"]
    wrong = _round_disagreement(model, head, ids[:, :8], [v for _, v in rounds])
    if wrong:                                   # rounds then run step by step, through the checked steps
        rounds[0][0].disable(f"the compiled {wrong} disagrees with plain decoding")
    speedups = _time_passes(model, head, ids, [(part, v) for part, v in passes if part.enabled])
    report["speedups"].update({_pass_name(part, v): x for (part, v), x in speedups.items()})
    if (model.compiled, (1, False)) in speedups:
        report["step_speedup"] = speedups[(model.compiled, (1, False))]
    for (part, variant), speedup in speedups.items():
        if keep_if_faster and speedup <= 1:
            part.drop(variant, f"not faster than eager on this host ({speedup:.2f}x)")
        else:
            part.ready.add(variant)
    for part in steps:
        if part.enabled and part.ready:
            part.status = "compiled"
    return True


def _pass_name(part, variant):
    """(T, keep) of a model's or head's CompiledSteps in words: "decode step", "verify of 3 tokens"..."""
    T, keep = variant
    if part.kind == "head":
        return f"head pass of {T} token{'s' if T > 1 else ''}"
    if part.kind == "round":
        return f"greedy round with k={T - 1}"
    return "decode step" if T == 1 else f"verify of {T} tokens{' (keeping step states)' if keep else ''}"


def _time_passes(model, head, ids, passes):
    """Each of these compiled passes against its eager twin, on the same inputs at the same position
    (a round: greedy decoding of a few tokens, its eager twin the same round uncompiled).
    -> {(CompiledSteps, (T, keep)): eager seconds / compiled seconds}"""
    from qwen.cache import keep_step_states
    from qwen.mtp import generate_mtp
    context, speedups = ids.shape[1], {}
    state = State(model)
    hidden = model.hidden(ids, state)                                                  # (1, context, H)
    emb, cache = model.embed_tokens(ids), AttentionState()
    if head is not None:
        head(emb, hidden, 0, cache)
    steps = [model.compiled] + ([head.compiled, head.round_compiled] if head is not None else [])
    steps = [part for part in steps if part is not None]
    enabled = [part.enabled for part in steps]

    def run(part, T, keep, compiled):
        part.enabled = compiled
        if part.kind == "model":
            state.pos = context
            keep_step_states(state, T, on=keep)
            model.forward(ids[:, :T], state)
        elif part.kind == "head":               # a guess as decoding makes it: the head pass and its scores
            cache.truncate(context)
            head.draft(model, hidden[:, :T], ids[:, :T], context, cache)
        else:                                   # eager twin: the same greedy_round, uncompiled
            for other in steps:
                other.enabled = compiled and other is part
            generate_mtp(model, head, ids[:, :8], max_new_tokens=2 * T, k=T - 1)
    try:
        for part, (T, keep) in passes:
            eager, compiled = _time_both(lambda: run(part, T, keep, False), lambda: run(part, T, keep, True))
            speedups[(part, (T, keep))] = eager / compiled
    finally:
        keep_step_states(state, on=False)
        for part, on in zip(steps, enabled):
            part.enabled = on
    return speedups


def _disagreement(model, head, ids, passes):
    """Run each of these compiled passes (of the model and the head) and its eager twin on the same inputs and state; -> which pass differs
    by more than rounding (e.g. "verify of 3 tokens (max |logit difference| 4.1)"), or None.
    (Inductor has shipped CPU kernels that computed garbage; this is cheap insurance.)"""
    from qwen.cache import keep_step_states, restore_state, snapshot_state
    context = ids.shape[1]
    tolerance = 1e-3 if model.embed_tokens.weight.dtype == torch.float32 else 5e-2    # relative to max |logit|

    def differs(a, b):
        a, b = a.float(), b.float()
        gap = (a - b).abs().max()
        return gap if not gap <= tolerance * a.abs().max() + 1e-4 else None       # NaN counts as different

    state = State(model)
    hidden = model.hidden(ids, state)                                                  # (1, context, H)
    snap = snapshot_state(state)
    for T, keep in [v for part, v in passes if part.kind == "model"]:
        outs = []
        for compiled in (False, True):
            restore_state(state, snap)
            keep_step_states(state, T, on=keep)
            model.compiled.enabled = compiled
            outs.append(model.forward(ids[:, :T], state))                            # (1, T, V)
        keep_step_states(state, T, on=False)
        model.compiled.enabled = True
        gap = differs(*outs)
        if gap is not None:
            return f"{'decode step' if T == 1 else f'verify of {T} tokens'} (max |logit difference| {float(gap):.3g})"
    emb = model.embed_tokens(ids)
    for T, _ in [v for part, v in passes if part.kind == "head"]:
        cache, outs = AttentionState(), []
        head(emb, hidden, 0, cache)                                                    # eager (T = context)
        for compiled in (False, True):
            cache.truncate(context)
            head.compiled.enabled = compiled
            outs.append(head.scored_pass(emb[:, :T], hidden[:, :T], context, cache))     # (1, T, H), scores
        head.compiled.enabled = True
        gap = differs(outs[0][0], outs[1][0])
        if gap is None and outs[1][1] is not None:          # the graph scored the draft: against eager scores
            gap = differs(head.draft_logits(outs[0][0], model.lm_head)[0], outs[1][1])
        if gap is not None:
            return f"draft head pass of {T} tokens (max |difference| {float(gap):.3g})"
    return None


def _round_disagreement(model, head, prompt, variants):
    """The first round of greedy decoding through each of these compiled round graphs (T, keep) against plain decoding
    (its steps checked above); -> which round gives other tokens, or None.
    subtle: only the first round's tokens. In bfloat16, compiled and eager round differently, and a
    near-tie between two tokens may later be decided either way; a miscompiled graph is wrong at once."""
    from qwen.mtp import generate_mtp
    from qwen.sample import generate
    for T, _ in variants:
        want = generate(model, prompt, max_new_tokens=T + 1)
        got = generate_mtp(model, head, prompt, max_new_tokens=T + 1, k=T - 1)[0]
        if got != want:
            return f"greedy round with k={T - 1} (tokens {got[:8]}… instead of {want[:8]}…)"
    return None
