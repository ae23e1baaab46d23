"""Recording a draft-tree run for the stepper's tree mode (qwen.tree), with the pitfall beside it.

    run = record_tree_run(model, mtp, chat, ids, Settings(prompt="Hi", tree="2+1"))    # a steps.Run

The engine runs the tree rounds (qwen.mtp.generate_mtp_stream(..., tree=...)); a TreeRecorder, passed as
its `trace`, hears each round from the inside (a qwen.trace.Watch) and keeps, as plain data:

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
import time
from dataclasses import replace

import torch

from demo.prompts import sampling
from demo.stepper.recording import deltanet_layers, nearest_deltanet, record_ids, token_label
from demo.stepper.steps import MAX_ROUNDS, Run
from demo.tokens import token_pieces
from qwen.cache import copy_state, keep_step_states
from qwen.mtp import generate_mtp_stream, main_picks
from qwen.trace import Watch, grid
from qwen.tree import Tree, parse_tree


def rows_after(model, tokens, state, tree):
    """The model over `tokens` (1, rows) as the rows of `tree` from `state` (changed) -> (logits (rows, V), per
    DeltaNet layer the memory after each row (rows, heads, Dk, Dv))."""
    keep_step_states(state, tree.size)
    logits, _ = model.forward_hidden(tokens, state, tree=tree)
    keep_step_states(state, on=False)
    return logits[0], [s.S_steps[:tree.size, 0] for s in state.deltanet_layers()]


class TreeRecorder(Watch):
    """Keeps each tree round as plain data (see the module docstring). watch: a DeltaNet layer's index among
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
        tree_S = [s.S_steps[:tree.size, 0] for s in state.deltanet_layers()]     # per layer (rows, heads, Dk, Dv)
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


def record_tree_run(model, mtp, chat, ids, settings, model_name="", max_seconds=None, progress=None,
                    clock=time.perf_counter):
    """Run speculative decoding with the settings' draft tree once, recording every round (TreeRecorder).
    ids: (1, T). progress(done, total) hears about each round; max_seconds caps the wall-clock time.
    -> steps.Run whose records are {"kind": "prefill"} then {"kind": "tree_round"}, one per round."""
    tree = parse_tree(settings.tree)
    deltanet = deltanet_layers(model.cfg)
    watch = TreeRecorder(model, nearest_deltanet(settings.watch_layer, deltanet) if settings.watch_layer >= 0 else None,
                         settings.watch_head if settings.watch_head >= 0 else None, sampling(settings))
    stop = tuple(chat.stop)
    records, ended, t0 = [], "", clock()
    stream = generate_mtp_stream(model, mtp, ids, settings.max_new_tokens, stop, tree.depth, settings.rollback,
                                 trace=watch, tree=tree, **sampling(settings))
    try:
        for emit, rounds, _ in stream:
            emitted = [{"token": tok, "origin": origin} for tok, origin in emit]
            if rounds == 0:
                records.append({"kind": "prefill", "round": 0, "pos": ids.shape[1], "k": tree.depth,
                                "rollback": settings.rollback, "rolled_back": False, "accepted": 0,
                                "emitted": emitted})
            else:
                rec = watch.rounds[-1]
                n = len(rec["path"]) - 1
                records.append({**rec, "kind": "tree_round", "round": rounds, "k": tree.depth,
                                "rollback": settings.rollback, "accepted": n, "emitted": emitted,
                                "next_token": rec["picks"][rec["path"][-1]],
                                "rolled_back": bool(tree.children[rec["path"][-1]])})
            done = sum(len(r["emitted"]) for r in records)
            if progress:
                progress(done, settings.max_new_tokens)
            if max_seconds and clock() - t0 > max_seconds and done < settings.max_new_tokens:
                ended = "time"
                break
            if len(records) > MAX_ROUNDS:
                ended = "rounds"
                break
    finally:
        stream.close()
    records = records[:MAX_ROUNDS + 1]
    out = [e["token"] for rec in records for e in rec["emitted"]]
    if not ended:
        ended = "stop" if out and out[-1] in stop else "length"
    prompt_ids = ids[0].tolist()
    named = record_ids(records) | set(prompt_ids) | set(out)
    named |= {tok for rec in records for tok in rec.get("tokens", []) + rec.get("picks", []) + rec.get("row_picks", [])}
    labels = {i: token_label(chat, i) for i in named}
    settings = replace(settings, k=tree.depth)          # a tree drafts as deep as its longest path
    return Run(settings=settings, model_name=model_name, prompt_ids=prompt_ids, output_ids=out,
               pieces=token_pieces(chat.decode, out), labels=labels, records=records, stop_ids=list(stop),
               ended=ended)


def is_tree_run(run):
    """Was this run recorded with a draft tree (the stepper's tree mode)?"""
    return bool(getattr(run.settings, "tree", ""))

