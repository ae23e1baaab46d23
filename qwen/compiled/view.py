"""Compiled views: the model and its head seen through their compiled graphs, made from outside.

    fast = compile_model(model, ks=(2,))      # a CompiledModel over the same module: nothing copied
    generate(fast, ids)                       # the same decoding code; a pass with a ready graph takes it
    generate(model, ids)                      # the eager reference, as it was

A view reads and writes its module's attributes (weights, config, submodules) and runs the module's
own methods with the view as `self`, so every path through the model reaches the one method the view
overrides: Model.step_pass, MTP.head_pass, MTP.select_round and MTP.fuses. Where no graph is ready for a
pass (another T, still compiling, dropped by warm_up), the eager method serves it.
isinstance(view, Model) holds, as for the module itself.
"""
import inspect

import torch.nn as nn

from qwen.mtp import greedy_round


class CompiledView:
    """A module (its `eager` attribute) with `steps`, the CompiledSteps serving its passes (None: none)."""
    OWN = ("eager", "steps", "rounds")

    def __init__(self, module, steps):
        object.__setattr__(self, "eager", plain(module))
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "rounds", None)

    def __getattr__(self, name):                    # only what the view's own class lacks
        eager = object.__getattribute__(self, "eager")
        for klass in type(eager).__mro__:
            if klass is nn.Module:                  # nn.Module's machinery stays the module's own
                break
            method = vars(klass).get(name)
            if inspect.isfunction(method):
                return method.__get__(self)         # the module's method, run on the view
        return getattr(eager, name)

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

    def lookup(self, steps, T, keep=False):
        """The graph of `steps` for a pass of T tokens, or None (eager)."""
        return steps.lookup(T, keep) if steps is not None else None


class CompiledModel(CompiledView):
    """The main model, each pass of T tokens through its graph where one is ready."""

    def step_pass(self, ids, positions, state, last_only=False):
        graph = self.lookup(self.steps, ids.shape[1], state.keeping())
        out = graph(ids, positions, state) if graph else None
        if out is None:
            return self.eager.step_pass(ids, positions, state, last_only)
        logits, hidden = out
        return (logits[:, -1:] if last_only else logits), hidden


class CompiledHead(CompiledView):
    """The MTP head, its passes through their graphs, and (`rounds`, small models) a greedy `select`
    round as one graph per k."""

    def head_pass(self, emb_next, hidden, positions, cache):
        graph = self.lookup(self.steps, emb_next.shape[1])
        out = graph(emb_next, hidden, positions, cache) if graph else None
        return out if out is not None else self.eager.head_pass(emb_next, hidden, positions, cache)

    def select_round(self, model, state, head_cache, tok_d1, out1, positions, noise=None):
        graph = self.lookup(self.rounds, positions.shape[0], True) if noise is None else None
        out = graph(state, head_cache, tok_d1, out1, positions) if graph else None
        return out if out is not None else greedy_round(model, self, state, head_cache, tok_d1, out1, positions, noise)

    def fuses(self, model, k, sampled=False):
        """A greedy round where its graph is ready; any round where no compiled verify pass would be
        lost (the model's verify pass runs eagerly anyway); else step by step.
        subtle: the round graph is greedy only. One graph for both (the noise multiplied by 0 when
        greedy) made greedy speculative decoding of the embedded model 15% slower (docs/benchmarks.md,
        2026-12-03, sampling with shared noise), and a graph per rule would double the rounds' compiling."""
        if not sampled and self.lookup(self.rounds, k + 1, True):
            return True
        verify = model.steps if type(model) is CompiledModel else None
        return self.lookup(verify, k + 1, True) is None


def plain(module):
    """The eager module behind a view (or the module itself)."""
    return module.eager if isinstance(module, CompiledView) else module
