"""Frozen graphs of the 0.8B shape (random bfloat16 weights) compiled with a chosen set of GEMM backends: a step,
a verify pass of 2 and 3 rows keeping step states (in steps), and scripted speculative ÷ plain at hit 0.9 and 0.5.

    python -m tools.frozen_gemms CPP          # what qwen.compiled uses (steps.py)
    python -m tools.frozen_gemms CPP,ATEN     # oneDNN offered too, as before 2026-12-06

Each run compiles afresh in its own process (minutes); autotuning times candidates, so compile twice to see its spread.
"""
import sys
import time

import torch

BACKENDS = sys.argv[1] if len(sys.argv) > 1 else "CPP"
_compile = torch.compile


def with_backends(fn=None, **kw):
    """torch.compile, the frozen strategy's GEMM backends replaced by BACKENDS."""
    options = kw.get("options")
    if options and "max_autotune_gemm_backends" in options:
        options["max_autotune_gemm_backends"] = BACKENDS
    return _compile(fn, **kw)


torch.compile = with_backends

from qwen.bench import random_head, random_model          # noqa: E402  (after the patch: steps.py calls torch.compile)
from qwen.compiled import warm_up                         # noqa: E402
from qwen.costs import Pass, time_pass                    # noqa: E402
from tools.scripted_lanes import scripted_speedups       # noqa: E402


def main():
    torch.set_num_threads(2)
    model, _ = random_model(torch.bfloat16)
    head = random_head(model.cfg, torch.bfloat16)
    t0 = time.perf_counter()
    report = warm_up(model, head, ks=[1, 2], keep_if_faster=False)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}; backends {BACKENDS}: {report['status']}, "
          f"compiled in {time.perf_counter() - t0:.0f} s")
    fast, fast_head = report["model"], report["head"]
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(1))
    step, two, three = Pass(1), Pass(2, keep=True), Pass(3, keep=True)     # a step; verify passes keeping step states
    med = time_pass(fast, [step, two, three], repeats=9)
    print(f"step {1000 * med[step]:.1f} ms; verify of 2 rows {med[two] / med[step]:.2f} steps, "
          f"of 3 rows {med[three] / med[step]:.2f} steps")
    with torch.inference_mode():
        scripted_speedups(fast, fast_head, ids)


if __name__ == "__main__":
    main()
