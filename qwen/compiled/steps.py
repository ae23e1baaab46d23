"""Compiled decoding steps: CompiledSteps, and how a host's model, head and greedy round are prepared.

    compile_model(model, ks=(2,)); compile_head(head, ks=(2,))   # lazy: each pass compiles on first use
    compile_round(model, head, ks=(2,))     # a small model's greedy `select` round as one graph per k
    report = warm_up(model, head, ks=(2,))  # warmup.py: compile now, check, keep each pass where faster

A pass compiles once per number of tokens T and serves every position (cache.py keeps the shapes static):
model.step at T = 1 (decode) and 1+k (verify), head.run at T = 1 (draft) and 1+k (catch-up), and
mtp.greedy_round per k. Prefill stays eager. _prepare readies the weights for the host:
    CPU, small model, or wide one bfloat16 holds exactly   unfrozen graphs reading a row-major copy, bfloat16
        where exact (stream_weights); kernels called from C++ (WRAPPER_IN_CPP); each saved whole (saved.py)
    CPU, other wide models     frozen packed weights where the copies fit (freeze_fits), max-autotune GEMMs,
        eager passes on oneDNN-packed copies (pack_for_eager); one-token passes as _one_token_choice says
    CUDA                       CUDA graphs ("reduce-overhead"), state buffers static (never run on a GPU)
Where compiling is impossible, fails or is not faster, passes run eagerly and CompiledSteps.status says
why. The reasons for each choice are in docs/design.md ("Compiled passes"); figures in docs/benchmarks.md.
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
    """x with standard strides: x itself where it has them, else a copy. subtle: a compiled step is
    guarded on its inputs' strides, and a slice such as ids[:, :1] of a (1, 32) tensor has stride
    (32, 1) where a fresh (1, 1) one has (1, 1)."""
    stride, standard = 1, []
    for size in reversed(x.shape):                      # (a, b, c) -> (b*c, c, 1)
        standard.append(stride)
        stride *= size
    return x if x.stride() == tuple(reversed(standard)) else x.clone(memory_format=torch.contiguous_format)


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
    other pass runs eagerly (compiling every T a caller might use would take far too long)."""

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



# The small-model CPU graphs: kernels called from C++, and (realize_opcount_threshold) every input of
# a streamed Linear computed once into a buffer. Where a step is all overhead, the C++ caller is
# faster: inductor's Python wrapper spends per call about what a small model's arithmetic costs (a
# `reinterpret_tensor` per view, an `assert_size_stride` per tensor, shapes its guards already checked);
# the price is a longer compile (docs/benchmarks.md, 2026-11-30, kernels called from C++).
# subtle: inductor otherwise inlines a cheap producer, such as the RMSNorm before a projection, into
# each of the layer's dot products (qwen.linear): the output layer then renormalised its input once per
# output row, and a verify pass cost more than plain decoding gained.
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
    # max-autotune times a C++ micro-GEMM against ATen's for every matmul shape, which lengthens compiling:
    # worth it only where weights dominate a step (wide models), not on a small model.
    options = dict(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN") if autotune else dict(WRAPPER_IN_CPP)
    simplify_fewer()                             # exact, and a shorter compile (internals.py)
    if not freeze:
        # a small model's C++ at -O2: built sooner, runs as fast (internals.quick_builds)
        return SavedGraphs(fn, owners, kind, os.path.join(cache_dir(), "graphs"), options, quick_build=not autotune)
    compiled = torch.compile(fn, fullgraph=True, options=options)

    # freezing: the weights become constants of the graph, packed once for its GEMMs, so a pass of
    # T rows streams each weight once (unfrozen, the BLAS repacks it per call, so that on an AVX2 CPU
    # a verify pass of a few tokens costs several steps). The price is a packed copy per graph.
    # A small model (no autotuning), frozen only when asked (_freeze_choice), keeps its weights
    # unpacked: a packed GEMM's cost per call outweighs the work on tiny matrices, and speculative
    # decoding was slower with it (docs/benchmarks.md, 2026-11-30, the embedded model compiled at AVX2).
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
    eagerly already, and compiled it measured slower than eager; frozen, it beat the step with packed
    eager weights (docs/benchmarks.md, 2026-11-30 frozen weights, 2026-12-01 compiled one-token passes).
    Streamed in bfloat16, the decode step reads half the bytes, and compiled it is faster than eager
    (docs/benchmarks.md, 2026-12-02, streamed weights)."""
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
    ("Cannot cache a graph with freezing enabled"), so every start redoes it, and the graphs run no
    faster frozen; unfrozen graphs are also saved whole (saved.py), so a later start only loads them
    (docs/benchmarks.md, 2026-11-30, the embedded model compiled at AVX2)."""
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
    output layer's own streamed rows (the same tensor: no copy): in bfloat16, half the bytes a guess
    reads eagerly through the BLAS in float32."""
    streams = head.fc.streamed is not None and getattr(lm_head, "streamed", None) is not None
    if head.draft_vocab is None and streams:
        head.draft_streamed = lm_head.streamed




def compile_round(model, head, ks=(2,), freeze=None):
    """Prepare the whole greedy `select` round (mtp.greedy_round: drafts, verify, select, the head's
    catch-up) as one compiled graph per k, kept in head.round_compiled. On a small model a round of
    separate calls (a head pass per draft, the verify pass, the Python between) pays the overhead of
    each; as one call it is faster (docs/design.md, a small model's greedy round). -> CompiledSteps"""
    head.round_compiled = _prepare([model, head], round_of, {(1 + int(k), True) for k in ks}, freeze, "round")
    return head.round_compiled


def lay_out_transposed(modules):
    """Store every Linear weight W (out, in) as the contiguous transpose it is multiplied by: the
    values and shape stay, only the memory order changes (strides (1, in)). Idempotent; a tied
    weight (lm_head = embed_tokens) is laid out once.
    subtle: a Linear computes x @ W.T. With W row-major that is MKL's "NT" GEMM, which for a few rows
    of a small matrix costs several times one row at AVX2; with W.T contiguous it is an "NN" GEMM
    streaming the weight once, and a small model's verify pass costs fewer steps (docs/benchmarks.md,
    2026-11-30, the embedded model compiled at AVX2). (A wide model that does not stream is left as it
    is: it freezes packed weights where the copies fit, and there the layout does not matter.)"""
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
    subtle: a wide model's step reads its weights from memory, so half the bytes is most of the gain, and
    one copy for every graph keeps peak memory far below a frozen copy per graph. The price: a verify pass
    of several rows costs more steps than frozen (docs/benchmarks.md, 2026-12-02, streamed weights;
    docs/design.md, streamed weights for a wide model)."""
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
