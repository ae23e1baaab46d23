"""A compile helper process: `python -m qwen.compiled.helper JOB_FILE kind:T:keep ...`, started by warm_up
(workers.start), never by hand. It compiles and saves the named passes' graphs, then exits.
"""
import sys
import threading

import torch

from qwen.compiled.saved import model_step, round_of, sampled_round_of
from qwen.compiled.steps import Strategy, _prepare, head_graph
from qwen.compiled.view import CompiledHead, CompiledModel
from qwen.compiled.warmup import _run_pass, warm_up_ids


def main(argv):
    """A helper: compile and save the graphs of the passes named "kind:T:keep" (kind: model, head or
    round) for the modules in the job file."""
    # subtle: a graph's guards check what its tensors are, so the weights must not become inference tensors
    # (loaded under inference_mode) where the parent's are not, nor the thread count differ
    job = torch.load(argv[0], weights_only=False)
    torch.set_num_threads(job["threads"])
    model, head = job["model"], job["head"]
    kinds = {"model": ([model], model_step), "head": head_graph(head, model), "round": ([model, head], round_of),
             "sampled_round": ([model, head], sampled_round_of)}
    ids = warm_up_ids(model, job["context"])                 # (1, context)
    for name in argv[1:]:
        kind, T, keep = name.split(":")
        variant = (int(T), bool(int(keep)))
        modules, fn = kinds[kind]
        # only this pass compiles: every other one runs eagerly here
        steps = _prepare(modules, fn, {variant}, kind, (Strategy.STREAMED, "a helper compiles saved graphs"))
        steps.warming_thread = threading.get_ident()          # a failure ends the helper with its error
        fast = CompiledModel(model, steps if kind == "model" else None)
        fast_head = None
        if head is not None:
            fast_head = CompiledHead(head, steps if kind == "head" else None)
            fast_head.rounds = steps if kind == "round" else None
            fast_head.sampled_rounds = steps if kind == "sampled_round" else None
        with torch.inference_mode():                        # as warm_up runs it
            _run_pass(fast, fast_head, steps, variant, ids)


if __name__ == "__main__":
    main(sys.argv[1:])
