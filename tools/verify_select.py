"""What a `select` round's verify pass costs at the 0.8B shape: random bfloat16 weights, compiled frozen, 2 threads.
Times a step, a verify pass of 2 and 3 rows keeping step states followed by the select of n rows (select_step_states),
and the same passes keeping none; then scripted speculative ÷ plain at k = 1, 2 and hit 0.9, 0.5 (48 tokens).

    python -m tools.verify_select

It calls only select_step_states and keep_step_states, so the same script measures any commit (an A/B: run it in a
worktree of the other). Compiling takes about 9 minutes on 2 cores.
"""
import resource
import time

import torch

from qwen.bench import random_head, random_model
from qwen.compiled import warm_up
from qwen.costs import Pass, time_pass
from tools.scripted_lanes import scripted_speedups

# a step; verify passes of T rows keeping step states, then the select of n rows; and keeping none
PASSES = [Pass(1), Pass(2, True, select=1), Pass(2, True, select=2), Pass(2), Pass(3, True, select=1),
          Pass(3, True, select=3), Pass(3)]


def main():
    torch.set_num_threads(2)
    model, _ = random_model(torch.bfloat16)
    head = random_head(model.cfg, torch.bfloat16)
    t0 = time.perf_counter()
    report = warm_up(model, head, ks=[1, 2], rollbacks=("select", "recompute"), keep_if_faster=False)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}: {report['status']}, "
          f"compiled in {time.perf_counter() - t0:.0f} s", flush=True)
    fast, fast_head = report["model"], report["head"]
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(1))
    med = time_pass(fast, PASSES, repeats=11)
    step = med[PASSES[0]]
    print(f"step {1000 * step:.1f} ms", flush=True)
    for v in PASSES[1:]:
        what = f"keeping step states, then the select of {v.select}" if v.keep else "keeping none"
        print(f"  verify of {v.rows} rows, {what}: {med[v] / step:.2f} steps ({1000 * med[v]:.1f} ms)", flush=True)
    with torch.inference_mode():
        scripted_speedups(fast, fast_head, ids)
    print(f"peak resident {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.1f} GB")


if __name__ == "__main__":
    main()
