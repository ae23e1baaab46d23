"""Compiled decoding steps (the gpt-fast design, for a hybrid model): how each host's graphs are prepared.

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
the reason is kept in `model.compiled.status` (a Status: its phase, and why). warm_up compiles graphs missing on disk in parallel,
handing all but one to helper processes (workers.py); a small model's graphs are built at -O2
and with less sympy work, sooner and computing the same (internals.py). warm_up itself is in warmup.py.
"""
import enum
import functools
import logging
import os
import threading
from dataclasses import dataclass

import torch

from qwen import settings
from qwen.compiled import host
from qwen.compiled.host import AUTOTUNE_HIDDEN, cache_dir, compiler_missing, cpp_compiler
from qwen.compiled.internals import configure_dynamo, simplify_fewer, skip_proven_isa_probes, use_cache_dir
from qwen.compiled.saved import SavedGraphs, head_run, model_step, round_of, state_buffers
from qwen.linear import Linear, pack_weights, packing_missing, stream_dtype, streamed_copy

log = logging.getLogger("qwen.compile")


def dense(x):
    """x with standard strides. subtle: a compiled step is guarded on its inputs' strides, and a slice
    such as ids[:, :1] of a (1, 32) tensor has stride (32, 1) where a fresh (1, 1) one has (1, 1)."""
    return x.clone(memory_format=torch.contiguous_format)


class Phase(enum.Enum):
    """Where a model's compiled passes stand."""
    LAZY = "compiles on first use"
    COMPILING = "compiling"
    COMPILED = "compiled"
    COMPILING_MORE = "compiled, compiling more"  # what plain and greedy decoding use is ready, the rest compiling
    EAGER = "eager"


class Why(enum.Enum):
    """Why passes run eagerly: a kind to branch and test on; the words are for people."""
    NOT_ASKED = "compiling was not asked for"
    NO_COMPILER = "no C++ compiler (install g++)"
    FAILED = "compiling failed"
    WRONG = "the compiled pass computes something else"
    SLOWER = "not faster than eager on this host"
    NOT_WARMED = "not warmed up (only greedy decoding was asked for)"
    WIDE_STEP = "a wide model's one-token step gains only from frozen weights"


@dataclass(frozen=True)
class Status:
    """A phase, and for EAGER why (its kind, and a detail such as the error or the measured ratio).
    str(): "compiled", "eager: compiling failed (RuntimeError: …)"."""
    phase: Phase
    why: Why = None
    detail: str = ""

    @property
    def reason(self):
        """Why, in words: "compiling failed (RuntimeError: …)", or "" where there is no why."""
        if self.why is None:
            return ""
        return self.why.value + (f" ({self.detail})" if self.detail else "")

    def __str__(self):
        return f"{self.phase.value}: {self.reason}" if self.why is not None else self.phase.value


class CompiledSteps:
    """A compiled function and the passes it serves, as (T tokens, keeps step states) pairs; any
    other pass runs eagerly (compiling every T a caller might use would cost minutes each)."""

    def __init__(self, fn, variants, kind="model"):
        self.fn, self.variants, self.kind = fn, set(variants), kind     # kind: "model", "head" or "round"
        self.enabled = True
        self.frozen, self.freeze_reason = False, ""   # weights baked into each graph (see _compile)
        self.status = Status(Phase.LAZY)        # warm_up: -> COMPILING -> COMPILED, or EAGER and why
        self.warming_thread = None               # while warm_up compiles, only its thread uses the compiled steps
        self.eager_passes = {}                   # (T, keep) -> Status: why that pass runs eagerly (drop)
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
        args = [dense(a) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            return self.fn(variant, *args)
        except Exception as e:                   # compiling happens on a call; it fails before running
            if self.warming_thread == threading.get_ident():
                raise
            self.disable(Why.FAILED, f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
            return None

    def disable(self, why, detail="", level=logging.WARNING):
        """Every pass eager from now on, for this reason (a Why, and words for people)."""
        self.enabled, self.status = False, Status(Phase.EAGER, why, detail)
        log.log(level, "compiled steps off: %s", self.status)

    def drop(self, variant, why, detail=""):
        """Run one pass, (T, keeps step states), eagerly from now on; the others stay compiled."""
        self.variants.discard(variant)
        self.eager_passes[variant] = Status(Phase.EAGER, why, detail)
        log.info("pass %s stays eager: %s", variant, self.eager_passes[variant])
        if not self.variants:
            self.disable(why, detail, logging.INFO)



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


def freeze_fits(modules, graphs, available=None):
    """Whether freezing `graphs` graphs over these modules' weights fits in memory: each frozen graph
    holds its own packed copy of the weights, and we allow them half of what is available.
    -> (bool, reason)"""
    weights = sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
    available = host.memory_available() if available is None else available
    if available is None:
        return False, "free memory unknown"
    need = weights * graphs
    verdict = need <= available // 2
    return verdict, (f"{graphs} packed weight copies need {need / 2**30:.1f} GB, "
                     f"{available / 2**30:.1f} GB available")


def _compile(fn, owners, kind, device, autotune=True, freeze=False):
    """fn(*owners, *args) compiled, as a function of (pass, *args): on CPU with the weights as inputs,
    saved whole on disk (saved.py); frozen, or on CUDA, through dynamo, which picks the graph per pass."""
    use_cache_dir(cache_dir())
    if torch.device(device).type == "cpu":
        skip_proven_isa_probes(cache_dir(), cpp_compiler())
    configure_dynamo()
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
        # a small model's C++ at -O2: built in half the time, as fast (internals.quick_builds)
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
        return False, "these are not frozen"
    fits, why = freeze_fits(modules, several + 1)
    return fits, why if fits else f"no memory for one more frozen copy: {why}"


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
    available = host.memory_available()
    if need and (available is None or need > available // 2):
        log.info("eager passes keep the BLAS: packed weights need %.1f GB, %s available", need / 2**30,
                 "unknown" if available is None else f"{available / 2**30:.1f} GB")
        return 0
    return pack_weights(modules)


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
    eager = {v: Status(Phase.EAGER, Why.WIDE_STEP, one_why) for v in variants - several} if not one_token else {}
    steps = CompiledSteps(_compile(fn, modules, kind, device, autotune, freeze), set(variants) - set(eager), kind)
    steps.frozen, steps.freeze_reason, steps.eager_passes = freeze, why, eager
    if eager:
        log.info("the %s's one-token pass stays eager: %s", kind, one_why)
    if compiler_missing(device):
        steps.disable(Why.NO_COMPILER)
    return steps
