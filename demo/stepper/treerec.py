"""A draft-tree round's notes for the stepper's tree mode (qwen.tree), with the pitfall beside it.

demo.stepper.recording.record_run records a tree run as it records a chain (one qwen.trace.Trace record a
round), with a TreeTrace that records each round's tree itself: a TreeNotes watch hears the same rounds (the
trace passes each hook on to it) and keeps, per round, what the tree mode draws; the trace writes it into the
round's own record, whose kind is then "tree_round":

    parents, depths, tokens      the tree's shape and its rows (row 0: the round's first token)
    nodes                        per draft: the head's probability and its rank among its siblings
    picks, path                  the main model's token after each row, the accepted rows
    mask                         which earlier rows each row sees (its ancestors: the ancestor mask)
    windows                      per row, the K inputs its causal conv reads (state before the round or rows)
    memory                       the watched layer and head: the memory before the round, and per row what
                                 its path wrote (its memory minus that), the tree's and, as the pitfall,
                                 a chain engine's, which runs the rows in order (a sibling's token mixed in)
    mixed                        per row: how far the row-order memory is from the tree's, over every
                                 DeltaNet layer (‖S_row order − S_tree‖ / ‖S_tree − S_before‖, the largest)
    row_picks                    the main model's token after each row when the rows run in order

The row-order pass runs on a copy of the state, so the engine's own state is never touched.
"""
import torch

from demo.stepper.steps import deltanet_layers
from qwen.cache import copy_state, keep_step_states
from qwen.mtp import main_picks
from qwen.trace import Watch, grid
from qwen.tree import Tree


def rows_after(model, tokens, state, tree):
    """The model over `tokens` (1, rows) as the rows of `tree` from `state` (changed) -> (logits (rows, V), per
    DeltaNet layer the memory after each row (rows, heads, Dk, Dv))."""
    keep_step_states(state, tree.size)
    logits, _ = model.forward_hidden(tokens, state, tree=tree)
    memories = [s.memories(tree.parents)[:, 0] for s in state.deltanet_layers()]
    keep_step_states(state, on=False)
    return logits[0], memories


class TreeNotes(Watch):
    """Keeps each tree round's notes as plain data (see the module docstring). watch: a DeltaNet layer's index among
    the DeltaNet layers and a value head, or None for each: chosen at the first round, where the row-order
    memory goes most wrong (the clearest picture of the pitfall), then kept for the run."""

    def __init__(self, model, watch_layer=None, watch_head=None, sampling=None):
        self.model, self.layer, self.head, self.sampling = model, watch_layer, watch_head, sampling or {}
        self.rounds, self._twin, self._round = [], None, None

    def drafted(self, state, tree, tokens, guesses):
        self._twin = copy_state(state)                                 # before the pass, for the row-order run
        self._before = [s.S[0].clone() for s in state.deltanet_layers()]     # per layer (heads, Dk, Dv)
        kernel = self.model.cfg.linear_conv_kernel_dim
        self._round = {"pos": state.pos, "parents": list(tree.parents), "depths": list(tree.depths),
                       "tokens": tokens[0].tolist(),
                       "nodes": [None] + [{"prob": round(g.prob(self.sampling.get("temperature")), 5), "rank": g.rank}
                                          for g in guesses[1:]],
                       "mask": [[int(seen) for seen in row] for row in tree.seen],
                       "windows": [list(row) for row in tree.conv_reads(kernel)], "kernel": kernel}
        self._tree, self._tokens = tree, tokens

    def verified(self, state, head_cache, logits, picks, path):
        tree, rec = self._tree, self._round
        rec["picks"], rec["path"] = list(picks), list(path)
        in_order = Tree.chain(tree.size - 1)
        row_logits, row_S = rows_after(self.model, self._tokens, self._twin, in_order)
        rec["row_picks"] = main_picks(row_logits, in_order, rec["pos"], self.sampling)
        tree_S = [s.memories(tree.parents)[:, 0] for s in state.deltanet_layers()]   # per layer (rows, heads, Dk, Dv)
        if not tree_S:                                                           # no DeltaNet layer: no memory
            rec["mixed"], rec["memory"] = [0.0] * tree.size, None
            return
        # how wrong row order is, per layer, row and head: relative to what the row's own path wrote
        wrong = torch.stack([((r - t).flatten(-2).norm(dim=-1) /
                              (t - b).flatten(-2).norm(dim=-1).clamp_min(1e-12))
                             for t, r, b in zip(tree_S, row_S, self._before)])  # (layers, rows, heads)
        rec["mixed"] = [round(float(x), 4) for x in wrong.amax(dim=(0, 2))]
        if self.layer is None or self.head is None:
            per = wrong.amax(dim=1)                                              # (layers, heads)
            layers = range(per.shape[0]) if self.layer is None else [self.layer]
            heads = range(per.shape[1]) if self.head is None else [self.head]
            self.layer, self.head = max(((la, h) for la in layers for h in heads), key=lambda lh: float(per[lh]))
        L, h = self.layer, self.head
        before = self._before[L][h]
        rec["memory"] = {"layer": deltanet_layers(self.model.cfg)[L], "head": h, "before": grid(before),
                         "tree": [grid(S[h] - before) for S in tree_S[L]],
                         "row_order": [grid(S[h] - before) for S in row_S[L]]}
        self._twin = None

    def rolled_back(self, state, head_cache):
        self._round["kv_after"] = state.pos
        self.rounds.append(self._round)
