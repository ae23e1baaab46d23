"""Compiled decoding steps: CompiledSteps, and how a model, its head and a greedy round are prepared.

    fast = compile_model(model, ks=(2,))          # a compiled view (view.py); each pass compiles on first use
    head = compile_head(head, ks=(2,), model=fast)
    compile_round(fast, head, ks=(2,))            # a small model's `select` round as one graph per k

A pass compiles once per number of tokens T and serves every position (cache.py keeps shapes static):
model.step at T = 1 and 1+k, head.run at T = 1 and 1+k, mtp.greedy_round per k; prefill stays eager.
The strategy (host.choose_strategy) decides how graphs get their weights: STREAMED (CPU: StreamedLinear
rows, graphs saved whole), FROZEN (CPU, a wide bfloat16 model: packed into each graph), CUDA (CUDA graphs),
AHEAD (asked for, as on ZeroGPU: exported and built into package files, ahead.py).
Where compiling is impossible, fails or is not faster, passes run eagerly and `status` says why
(docs/design.md, "Compiled passes" and "Trusting a compiled pass").
"""
import enum
import functools
import logging
import os
import threading
from dataclasses import dataclass

import torch

from qwen.compiled.ahead import AheadGraphs
from qwen.compiled.host import (Strategy, cache_dir, choose_strategy, compiler_missing, cpp_compiler, is_wide,
                                variants_for)
from qwen.compiled.internals import configure_dynamo, simplify_fewer, skip_proven_isa_probes, use_cache_dir
from qwen.compiled.saved import (SavedGraphs, head_run, head_scored, kv_buffers, model_step, round_of, sampled_round_of,
                                 state_buffers)
from qwen.compiled.streamed import StreamedLinear, restore_weights, stream_weights
from qwen.compiled.view import CompiledHead, CompiledModel, plain

log = logging.getLogger("qwen.compile")


def dense(x):
    """x with standard strides (x itself, or a copy): graphs are guarded on strides, and a slice such as
    ids[:, :1] of a (1, 32) tensor has stride (32, 1) where a fresh (1, 1) one has (1, 1)."""
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
        self.fn, self.variants, self.kind = fn, set(variants), kind     # kind: "model", "head", "round" or "sampled_round"
        self.enabled = True
        self.strategy, self.why = None, ""        # how the graphs get their weights, and why (_prepare)
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
        if self.strategy is Strategy.STREAMED:
            restore_weights(self.fn.owners)      # a wide model's released float32 weights (streamed.py)

    def decided(self):
        """What a warm-up decided about these passes, to carry to another process (on ZeroGPU a warm-up
        runs in a GPU process of its own): -> a picklable tuple for settle()."""
        return self.enabled, self.status, set(self.variants), set(self.ready), dict(self.eager_passes)

    def settle(self, decided):
        """Take what a warm-up in another process decided (its decided())."""
        self.enabled, self.status, self.variants, self.ready, self.eager_passes = decided

    def drop(self, variant, why, detail=""):
        """Run one pass, (T, keeps step states), eagerly from now on; the others stay compiled."""
        self.variants.discard(variant)
        self.eager_passes[variant] = Status(Phase.EAGER, why, detail)
        log.info("pass %s stays eager: %s", variant, self.eager_passes[variant])
        if not self.variants:
            self.disable(why, detail, logging.INFO)



# Streamed graphs: kernels called from C++ (inductor's Python wrapper costs per call about what a small
# model's arithmetic does), and every input of a streamed Linear computed once into a buffer (else inductor
# inlines e.g. the RMSNorm before the output layer into every row's dot product). And no loop of fewer than
# ROW_CHUNK elements a thread split over threads: a one-row pass's norms are one reduction of `hidden` elements,
# which inductor would otherwise share out between threads (summing in another order than the same row of a
# verify pass, whose rows are reduced one by one): batch invariance (docs/design.md, the same text in every dtype).
# Wide models only (host.is_wide, as RowwiseAttention): a small model's round graph ran 9% slower with
# both (docs/benchmarks.md, 2026-12-07, eighth session), and its float32 rows part by 1e-7 of a logit at most.
ROW_CHUNK = 16384
WRAPPER_IN_CPP = dict(cpp_wrapper=True, size_asserts=False, realize_opcount_threshold=4)
ROW_INVARIANT = {"cpp.min_chunk_size": ROW_CHUNK}


def compile_graphs(fn, owners, kind, device, strategy):
    """fn(*owners, *args) compiled for this strategy, as a function of (pass, *args): streamed graphs saved
    whole on disk (saved.py); frozen and CUDA graphs through dynamo, which picks the graph per pass."""
    if strategy is Strategy.AHEAD:               # package files, built and loaded without dynamo
        return AheadGraphs(fn, owners, kind, os.path.join(cache_dir(), "packages"))
    use_cache_dir(cache_dir())
    if strategy is not Strategy.CUDA:
        skip_proven_isa_probes(cache_dir(), cpp_compiler())
    configure_dynamo()
    if strategy is Strategy.CUDA:
        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)

        def on_cuda(variant, *args):
            # a CUDA graph writes in place only into inputs at a static address: every pass writes its state
            for t in state_buffers(args):
                torch._dynamo.mark_static_address(t)
            mark_growing(args)
            torch.compiler.cudagraph_mark_step_begin()      # a new pass: the last replay's outputs may go
            # a replay's outputs live in the graph's memory pool, overwritten by the next replay, yet a round's
            # head output is the next round's input: each caller gets copies (on an H200 without them:
            # "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run")
            return copied(compiled(*owners, *args))
        return on_cuda
    simplify_fewer()                             # exact, and a shorter compile (internals.py)
    if strategy is Strategy.STREAMED:            # C++ at -O2 (internals.quick_builds)
        return SavedGraphs(fn, owners, kind, os.path.join(cache_dir(), "graphs"),
                           dict(WRAPPER_IN_CPP, **(ROW_INVARIANT if is_wide(owners[0]) else {})), quick_build=True)
    # frozen: weights become constants, packed for max-autotuned GEMMs (a copy per graph, no cached start);
    # a small model frozen on request keeps them unpacked, where a packed GEMM's overhead outweighs its work
    # GEMMs from inductor's C++ templates only: offered oneDNN's too ("ATEN"), autotuning picked it for 2 or 3 rows from
    # cache-warm trials, and verify passes cost far more than the templates' (docs/benchmarks.md, 2026-12-06)
    wide = is_wide(owners[0])
    options = dict(max_autotune=True, max_autotune_gemm_backends="CPP") if wide else dict(WRAPPER_IN_CPP)
    config = {"freezing": True} if wide else {"freezing": True, "cpp.weight_prepack": False}
    compiled = torch.compile(fn, fullgraph=True, options=options)

    def frozen(variant, *args):
        # torch 2.13 ignores {"freezing": True} as a compile option: set while the graph compiles, in the call
        mark_growing(args)
        with torch._inductor.config.patch(config):
            return compiled(*owners, *args)
    return frozen


def copied(out):
    """A pass's outputs (a tensor, or tuples of tensors and None) as fresh copies."""
    if isinstance(out, tuple):
        return tuple(copied(o) for o in out)
    return out.clone() if isinstance(out, torch.Tensor) else out


def mark_growing(args):
    """Tell dynamo the capacity (dim 2) of every KV buffer among a pass's arguments varies, so that a
    longer generation (a larger buffer) does not compile the graph again. (Saved graphs mark their own.)"""
    for t in kv_buffers(args):
        torch._dynamo.mark_dynamic(t, 2)


def compile_model(model, ks=(2,), rollbacks=("select",), freeze=None, ahead=False):
    """A compiled view of the model (or of a view's model), its steps compiled on first use; the
    strategy as choose_strategy decides (freeze=True / False forces frozen / streamed). -> CompiledModel"""
    model, variants = plain(model), variants_for(ks, rollbacks)[0]
    return CompiledModel(model, _prepare([model], model_step, variants, "model",
                                         choose_strategy([model], freeze, len(variants), ahead)))


def compile_head(head, ks=(2,), freeze=None, model=None, ahead=False):
    """A compiled view of the MTP head, its passes for T = 1 and 1+k compiled on first use. Given the
    main `model`, streamed graphs also score the draft after every row (head_graph), reading the output
    layer's (or the draft vocabulary's) streamed rows: half the bytes of scoring eagerly in float32; frozen
    graphs too, with a packed copy of what they score, where those copies fit beside the head's (else the
    draft is scored eagerly). -> CompiledHead"""
    head, model, variants = plain(head), model and plain(model), variants_for(ks)[1]
    plan = choose_strategy([head], freeze, len(variants), ahead)
    if model is not None and plan[0] is Strategy.STREAMED and not isinstance(model.lm_head, StreamedLinear):
        with torch.inference_mode(False):
            model.lm_head = StreamedLinear(model.lm_head)
    scored = model is not None and plan[0] is Strategy.FROZEN and \
        choose_strategy([head, model.lm_head], freeze, len(variants))[0] is Strategy.FROZEN
    modules, fn = head_graph(head, model, scored)
    return CompiledHead(head, _prepare(modules, fn, variants, "head", plan))


def head_graph(head, model=None, scored=False):
    """-> (owners, function) of the head's compiled pass: scoring inside it where the output layer streams, or
    where asked (scored: a frozen head, which then packs the output layer, or the draft vocabulary's rows, too)."""
    if model is not None and (scored or isinstance(model.lm_head, StreamedLinear)):
        return [head, model.lm_head], head_scored
    return [head], head_run


def compile_round(model, head, ks=(2,), freeze=None, sampled=False):
    """Prepare the whole `select` round (mtp.greedy_round: drafts, verify, select, the head's catch-up)
    as one compiled graph per k, kept in the head view (a CompiledHead): greedy in `rounds`, or
    (sampled=True) with shared noise in `sampled_rounds` (docs/design.md, a small model's greedy round).
    -> CompiledSteps"""
    if not isinstance(head, CompiledHead):
        raise TypeError("compile_round needs the head's compiled view (compile_head)")
    variants, modules = {(1 + int(k), True) for k in ks}, [plain(model), plain(head)]
    plan = choose_strategy(modules, freeze, len(variants))
    steps = _prepare(modules, sampled_round_of if sampled else round_of, variants,
                     "sampled_round" if sampled else "round", plan)
    setattr(head, "sampled_rounds" if sampled else "rounds", steps)
    return steps


def lay_out_transposed(modules):
    """Store every Linear weight W (out, in) as the contiguous transpose it is multiplied by (strides
    (1, in); values and shape unchanged), so that the passes that stay eager multiply by an "NN" GEMM,
    cheaper at AVX2 for a few rows than MKL's "NT" one. A depthwise conv's weight (C, 1, K) is stored taps
    first (strides (1, C, C)), so each tap deltanet.taps_sum reads is contiguous over the channels and the
    conv and its silu compile to vector loops (strided, inductor wrote them scalar, in one thread).
    Idempotent; a tied weight is laid out once.
    subtle: a weight an Embedding shares (the tied output layer) stays row-major: a token's embedding is then one
    contiguous row, and the first norm sums it in order; read down a column, inductor ordered that sum one way for
    a one-row pass and another for several (docs/design.md, batch invariance)."""
    embeddings = {id(m.weight) for module in modules for m in module.modules() if isinstance(m, torch.nn.Embedding)}
    for module in modules:
        for part in module.modules():
            w = part.weight if isinstance(part, torch.nn.Linear) else None       # None: released (streamed.py)
            if w is not None and w.dim() == 2 and w.stride() == (w.shape[1], 1) and w.shape[1] > 1 \
                    and id(w) not in embeddings:
                w.data = w.data.t().contiguous().t()
            if isinstance(part, torch.nn.Conv1d) and part.weight.shape[1] == 1 and part.weight.stride(0) > 1:
                part.weight.data = part.weight.data.permute(2, 1, 0).contiguous().permute(2, 1, 0)   # (C, 1, K) taps first


def _prepare(modules, fn, variants, kind, plan):
    """The CompiledSteps of fn over these modules, for these passes (T, keep), with plan = (Strategy,
    why): for streamed graphs every Linear is swapped for a StreamedLinear (streamed.py; a wide model's
    float32 weights then released, its rows kept) and the weights left are laid out transposed."""
    strategy, why = plan
    device = next(modules[0].parameters()).device
    missing = compiler_missing(device)
    # not under inference_mode: guards check each weight's kind, and another process's saved graph would miss
    if strategy is Strategy.STREAMED:
        with torch.inference_mode(False):
            stream_weights(modules, rowwise=is_wide(modules[0]), release=is_wide(modules[0]) and not missing)
            lay_out_transposed(modules)
    steps = CompiledSteps(compile_graphs(fn, modules, kind, device, strategy), variants, kind)
    steps.strategy, steps.why = strategy, why
    if missing:
        steps.disable(Why.NO_COMPILER)
    return steps
