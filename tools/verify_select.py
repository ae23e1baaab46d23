"""What a `select` round's verify pass costs at the 0.8B shape: random bfloat16 weights, compiled frozen, 2 threads.
Times a step, a verify pass of 2 and 3 rows keeping step states followed by the select of n rows (select_step_states),
and the same passes keeping none; then scripted speculative ÷ plain at k = 1, 2 and hit 0.9, 0.5 (48 tokens).

    python -m tools.verify_select

It calls only select_step_states and keep_step_states, so the same script measures any commit (an A/B: run it in a
worktree of the other). Compiling takes about 9 minutes on 2 cores.
"""
import resource
import statistics
import time

import torch


from qwen.bench import random_head, random_model
from qwen.cache import State, keep_step_states, select_step_states
from qwen.compiled import warm_up
from tools.scripted_lanes import scripted_speedups

PASSES = [(1, False), (2, True, 1), (2, True, 2), (2, False), (3, True, 1), (3, True, 3), (3, False)]


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
    with torch.inference_mode():
        state = State(fast, 128)
        fast(ids, state, last_only=True)

        def one_pass(T, keep, n=None):                    # T rows at position 64, as a verify pass, then its select
            state.pos = 64
            for s in state.attention_layers():
                s.n = 64
            keep_step_states(state, T, on=keep)
            fast(torch.arange(1, T + 1)[None], state)
            if keep:
                select_step_states(state, 64, n)
        times = {v: [] for v in PASSES}
        for v in PASSES:
            one_pass(*v)
        for _ in range(11):
            for v in PASSES:
                t = time.perf_counter()
                one_pass(*v)
                times[v].append(time.perf_counter() - t)
        med = {v: statistics.median(ts) for v, ts in times.items()}
        step = med[(1, False)]
        print(f"step {1000 * step:.1f} ms", flush=True)
        for v in PASSES[1:]:
            what = f"keeping step states, then the select of {v[2]}" if v[1] else "keeping none"
            print(f"  verify of {v[0]} rows, {what}: {med[v] / step:.2f} steps ({1000 * med[v]:.1f} ms)", flush=True)
        scripted_speedups(fast, fast_head, ids)
    print(f"peak resident {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.1f} GB")


if __name__ == "__main__":
    main()
