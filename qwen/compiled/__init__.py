"""The compiled engine: the only code that knows about torch.compile. The model (qwen/model.py,
qwen/mtp.py) stays a plain description of the network; this package wraps it from outside.

    from qwen.compiled import warm_up
    report = warm_up(model, head, ks=(2,))   # compile now (or load from disk), check, keep where faster
    report["status"]                         # Status(Phase.COMPILED), or Phase.EAGER and why (a Why)
    fast, fast_head = report["model"], report["head"]    # compiled views of the modules: decode with these

Its modules, each importing only those above it:
    internals.py   every touch of torch's private internals, version-gated
    streamed.py    StreamedLinear, swapped in for nn.Linear: graphs read each weight row once, bf16 where exact (a
                   wide model then holds only those rows: its float32 weights released)
    host.py        this host and how it runs a model: dtype, C++ compiler, memory, cache folder; strategy, HostPlan
    files.py       graphs kept in files, one per pass: named by what they bake in, loaded once, written whole
    saved.py       graphs saved whole on disk and loaded at a later start
    ahead.py       graphs built ahead of time (torch.export, AOTInductor) into package files: ZeroGPU's way
    view.py        CompiledModel, CompiledHead: the modules seen through their graphs, made from outside
    steps.py       CompiledSteps, each strategy's graphs (compile_graphs), compile_model/head/round
    workers.py     a warm-up's graphs compiled, missing ones in helper processes too (main: a helper's entry)
    warmup.py      warm_up: compile, check against eager, keep each pass only where it is faster
"""
from qwen.compiled.host import compiler_missing, default_dtype
from qwen.compiled.steps import CompiledSteps, Phase, Status, Why, compile_head, compile_model, compile_round
from qwen.compiled.view import CompiledHead, CompiledModel
from qwen.compiled.warmup import warm_up

__all__ = ["CompiledHead", "CompiledModel", "CompiledSteps", "Phase", "Status", "Why", "compile_head", "compile_model", "compile_round",
           "compiler_missing", "default_dtype", "warm_up"]
