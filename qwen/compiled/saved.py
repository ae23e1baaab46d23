"""Compiled graphs saved whole on disk, so that a later start loads them instead of tracing them again
(docs/design.md, graphs saved whole): each pass is compiled ahead of time (`torch.compile(fn).aot_compile`)
into a self-contained function, its guards included, saved as a file and loaded without tracing.

    graphs = SavedGraphs(model_step, (model,), "model", folder)   # model_step(model, ids, positions, state)
    graphs((T, keep), ids, positions, state)    # loads or compiles the graph of this pass, then runs it

One graph per pass (T tokens, keeps step states) and batch size, compiled on its first call from that
call's arguments; its guards run once per layout of the arguments (argument_layout), then it is called
directly. Used for CPU graphs whose weights are inputs; frozen and CUDA graphs stay on dynamo's path.
"""
import contextlib
import logging

import torch

from qwen.cache import AttentionState, State
from qwen.compiled.files import GraphFiles
from qwen.compiled.internals import allow_aot_compile, quick_builds, saved_guard, unmark
from qwen.mtp import greedy_round

log = logging.getLogger("qwen.compile")

def model_step(model, ids, positions, state):
    return model.step(ids, positions, state)


def head_run(head, emb, hidden, positions, cache):
    return head.run(emb, hidden, positions, cache), None


def head_scored(head, lm_head, emb, hidden, positions, cache):
    """The head's pass and the draft's scores after each of its T rows (the output layer, or the draft
    vocabulary's rows, streamed). Every row: scoring only the one a caller needs made inductor index h
    inside the loop over the weights, unvectorised (docs/benchmarks.md, 2026-12-02)."""
    out = head.run(emb, hidden, positions, cache)
    return out, head.draft_logits(out, lm_head)[0]


def round_of(model, head, state, head_cache, tok_d1, out1, positions):
    return greedy_round(model, head, state, head_cache, tok_d1, out1, positions)


def sampled_round_of(model, head, state, head_cache, tok_d1, out1, positions, seed, temperature):
    """A round sampled with shared noise: seed (int64) and temperature (float32) as 0-d tensors, so that
    one graph serves every seed and temperature."""
    return greedy_round(model, head, state, head_cache, tok_d1, out1, positions, (seed, temperature))


def layer_states(args):
    """The per-layer states among a pass's arguments: a State's layers, a head's KV cache."""
    for arg in args:
        yield from arg.layers if isinstance(arg, State) else [arg] if isinstance(arg, AttentionState) else []


def kv_buffers(args):
    """The KV buffers among a pass's arguments."""
    for layer in layer_states(args):
        if isinstance(layer, AttentionState) and layer.k is not None:
            yield from (layer.k, layer.v)


def state_buffers(args):
    """Every buffer of the layer states among a pass's arguments: what the pass writes in place."""
    for layer in layer_states(args):
        yield from (t for t in vars(layer).values() if isinstance(t, torch.Tensor))


def argument_layout(variant, args):
    """Everything a graph's guards check about a pass's arguments that can change from call to call: the
    shape and dtype of every tensor (the state's buffers included), the state's padding and kept step
    states, the grad modes. Not the owners': their weights are fixed once loaded, their other tensors
    (a draft vocabulary) are in SavedGraphs' key. The guards cost a share of a small model's step, so
    they run once per layout."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + list(state_buffers(args))
    states = [a for a in args if isinstance(a, State)]
    tensors += [a.pad for a in states if a.pad is not None]
    keeps = tuple((a.pad is None, tuple(s.keep_steps for s in a.deltanet_layers())) for a in states)
    modes = torch.is_grad_enabled(), torch.is_inference_mode_enabled()    # of the global state guards check
    return variant, keeps, modes, tuple((t.shape, t.dtype, t.device) for t in tensors)


class SavedGraphs(GraphFiles):
    """fn(*owners, *args) compiled once per (pass, batch size), from a file when one was saved (files.py: the
    file, the lock, the counters); `graphs` {(pass, batch): compiled functions, tried in order}."""
    SUFFIX = ".graph"

    def __init__(self, fn, owners, name, folder, options=None, quick_build=False):
        super().__init__(fn, owners, name, folder)
        self.options = dict(options or {})
        self.quick_build = quick_build           # C++ built at -O2 (internals.quick_builds)
        self.trusted = {}                        # argument_layout -> the graph whose guards accepted it

    def __call__(self, variant, *args):
        batch = next(a for a in args if isinstance(a, torch.Tensor)).shape[0]
        unmark(kv_buffers(args))
        layout = argument_layout(variant, args), self.owner_tensors()
        trusted = self.trusted.get(layout)
        if trusted is not None:                  # these shapes passed this graph's guards before
            return trusted.fn(*self.owners, *args)
        for graph in self.graphs.get((variant, batch)) or [self._load_or_compile(variant, batch, args)]:
            try:
                with self.build_flags():         # (a first call may still build the graph's C++)
                    out = graph(*self.owners, *args)
            except RuntimeError as e:            # its guards: these arguments need another graph
                if not str(e).startswith("GuardManager check failed"):
                    raise
                continue
            if hasattr(graph, "fn"):
                self.trusted[layout] = graph
            return out
        log.info("no saved %s graph of pass %s fits these arguments: compiling one", self.name, variant)
        return self._load_or_compile(variant, batch, args, fresh=True)(*self.owners, *args)

    def build_flags(self):
        """The compiler flags this graph's C++ is built with, in force while it compiles and loads (a saved
        graph holds C++ source; loading looks its library up by source and command line)."""
        return quick_builds() if self.quick_build else contextlib.nullcontext()

    def owner_tensors(self):
        """The shapes of the owners' tensors that are not weights (e.g. a head's draft vocabulary)."""
        return tuple((n, t.shape) for m in self.owners for n, t in vars(m).items() if isinstance(t, torch.Tensor))

    def path(self, variant, batch):
        return self.file(variant, batch, torch.__version__, torch.backends.cpu.get_cpu_capability(),
                         sorted(self.options.items()))

    def _load_or_compile(self, variant, batch, args, fresh=False):
        """The graph of this pass from its file, or compiled from these arguments and saved (fresh: the
        loaded ones refused them; the new graph is tried first from now on, and its file replaced)."""
        return self.obtain((variant, batch), self.path(variant, batch), self._load,
                           lambda path: self._compile(args, path), fresh)

    def _load(self, path):
        """The graph saved at path (raises on a damaged or foreign file: obtain compiles instead)."""
        with open(path, "rb") as f, self.build_flags():
            return torch.compiler.load_compiled_function(f)

    def _compile(self, args, path):
        """The graph compiled from these arguments, saved at path (where it cannot be, still usable here)."""
        kv = list(kv_buffers(args))
        for t in kv:                             # the capacity is dynamic: one graph for every length
            torch._dynamo.mark_dynamic(t, 2)
        allow_aot_compile()
        try:
            compiled = torch.compile(self.fn, fullgraph=True, options=dict(self.options, guard_filter_fn=saved_guard))
            with self.build_flags():
                graph = compiled.aot_compile(((*self.owners, *args), {}))
        finally:
            unmark(kv)
        try:
            self.write_whole(path, lambda partial: graph.save_compiled_function(str(partial)))
        except Exception as e:
            log.warning("could not save the compiled %s graph (%s: %s)", self.name, type(e).__name__, e)
        return graph
