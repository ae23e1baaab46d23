"""Compiled views: the model and its head seen through their compiled graphs, made from outside.

    fast = compile_model(model, ks=(2,))      # a CompiledModel over the same module: nothing copied
    generate(fast, ids)                       # the same decoding code; a pass with a ready graph takes it
    generate(model, ids)                      # the eager reference, as it was

A view reads and writes its module's attributes and runs the module's own methods with the view as
`self`, so every path reaches the methods it overrides (Model.step_pass; MTP.head_pass, select_round,
fuses); where no graph is ready for a pass, the eager method serves it. isinstance(view, Model) holds.
"""
import functools
import inspect

import torch
import torch.nn as nn

from qwen.mtp import greedy_round


class CompiledView:
    """A module (its `eager` attribute) with `steps`, the CompiledSteps serving its passes (None: none)."""
    OWN = ("eager", "steps", "rounds", "sampled_rounds", "methods")

    def __init__(self, module, steps):
        module = plain(module)
        object.__setattr__(self, "eager", module)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "rounds", None)
        object.__setattr__(self, "sampled_rounds", None)
        object.__setattr__(self, "methods", own_methods(type(module)))

    def __getattr__(self, name):                    # only what the view's own class lacks
        method = self.methods.get(name)
        if method is not None:
            return method.__get__(self)             # the module's method, run on the view
        return getattr(self.eager, name)

    def __setattr__(self, name, value):
        if name in self.OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.eager, name, value)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    @property
    def __class__(self):                            # isinstance(view, Model) holds
        return type(self.eager)

    def serving(self):
        """Which graphs serve this view now, as a hashable value: costs timed through it hold while it is the same."""
        parts = [getattr(self, name) for name in ("steps", "rounds", "sampled_rounds")]
        return tuple((p.enabled, frozenset(p.ready), p.warming_thread is None) for p in parts if p is not None)

    def lookup(self, steps, T, keep=False):
        """The graph of `steps` for a pass of T tokens, or None (eager)."""
        return steps.lookup(T, keep) if steps is not None else None


class CompiledModel(CompiledView):
    """The main model, each pass of T tokens through its graph where one is ready."""

    def step_pass(self, ids, positions, state, last_only=False, tree=None):
        graph = self.lookup(self.steps, ids.shape[1], state.keeping()) if tree is None else None    # trees: eager
        out = graph(ids, positions, state) if graph else None
        if out is None:
            return self.eager.step_pass(ids, positions, state, last_only, tree)
        logits, hidden = out
        return (logits[:, -1:] if last_only else logits), hidden


class CompiledHead(CompiledView):
    """The MTP head, its passes through their graphs, and (small models) a `select` round as one graph
    per k: greedy (`rounds`), or sampled with shared noise (`sampled_rounds`)."""

    def head_pass(self, emb_next, hidden, positions, cache):
        graph = self.lookup(self.steps, emb_next.shape[1])
        out = graph(emb_next, hidden, positions, cache) if graph else None
        return out if out is not None else self.eager.head_pass(emb_next, hidden, positions, cache)

    def select_round(self, model, state, head_cache, tok_d1, out1, positions, noise=None):
        T, args = positions.shape[0], ()
        graph = self.lookup(self.rounds if noise is None else self.sampled_rounds, T, True)
        if graph and noise is not None:                     # one graph for every seed and temperature
            args = (torch.tensor(noise[0], dtype=torch.int64, device=positions.device),
                    torch.tensor(noise[1], dtype=torch.float32, device=positions.device))
        out = graph(state, head_cache, tok_d1, out1, positions, *args) if graph else None
        return out if out is not None else greedy_round(model, self, state, head_cache, tok_d1, out1, positions, noise)

    def fuses(self, model, k, sampled=False):
        """A round whose graph is ready; any round where no compiled verify pass would be lost (the
        model's verify pass runs eagerly anyway); else step by step. Greedy and sampled rounds are separate
        graphs: one for both was slower greedy (docs/benchmarks.md, 2026-12-03, shared noise)."""
        if self.lookup(self.sampled_rounds if sampled else self.rounds, k + 1, True):
            return True
        verify = model.steps if type(model) is CompiledModel else None
        return self.lookup(verify, k + 1, True) is None


@functools.cache
def own_methods(cls):
    """{name: function} of the methods cls and its bases define above nn.Module (whose machinery,
    parameters() and the like, stays the module's own), the nearest definition winning."""
    methods = {}
    for klass in reversed(cls.__mro__[:cls.__mro__.index(nn.Module)]):
        methods.update({name: f for name, f in vars(klass).items() if inspect.isfunction(f)})
    return methods


def plain(module):
    """The eager module behind a view (or the module itself)."""
    return module.eager if isinstance(module, CompiledView) else module
