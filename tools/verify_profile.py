"""Where a compiled (frozen) verify pass of 2 rows of the 0.8B shape spends its time against a one-row step: the
graphs' own kernels timed one by one (inductor's kernel profiling), summed by kind.

    python -m tools.verify_profile        # random bfloat16 weights, k = 1's graphs, 2 threads; minutes

In the output, `graph_N_kernel` rows are the matrix products (inductor's C++ GEMM templates) and the
`graph_N_cpp_fused_...` rows with addcmul, exp, sigmoid or softplus in their names are the DeltaNet layers' memory updates.
A frozen compile autotunes its GEMMs, so two runs can differ in the GEMM rows; compare kinds within one run.
"""
import os
import re
import statistics
import time
from collections import defaultdict

os.environ["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] = "1"        # before inductor reads its config

import torch                                                         # noqa: E402
from torch.profiler import ProfilerActivity, profile                 # noqa: E402

from qwen.bench import random_head, random_model                     # noqa: E402
from qwen.cache import State, keep_step_states                       # noqa: E402
from qwen.compiled import warm_up                                    # noqa: E402


def main():
    torch.set_num_threads(2)
    model, _ = random_model(torch.bfloat16)
    head = random_head(model.cfg, torch.bfloat16)
    t0 = time.perf_counter()
    report = warm_up(model, head, ks=[1], keep_if_faster=False)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}; {report['status']}, compiled in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    fast = report["model"]
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        state = State(fast, 128)
        fast(ids, state, last_only=True)

        def one_pass(rows, keep):                   # rows tokens at position 64, as a verify pass
            state.pos = 64
            keep_step_states(state, rows, on=keep)
            fast(torch.arange(1, rows + 1)[None], state)
            keep_step_states(state, rows, on=False)
        for variant in [(1, False), (2, True)] * 3:
            one_pass(*variant)
        for variant in [(1, False), (2, True)]:
            times = []
            for _ in range(7):
                t = time.perf_counter()
                one_pass(*variant)
                times.append(time.perf_counter() - t)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    one_pass(*variant)
            rows = sorted(((e.key, e.self_cpu_time_total / 5000, e.count // 5) for e in prof.key_averages()),
                          key=lambda r: -r[1])
            kinds = defaultdict(float)
            for name, ms, _ in rows:
                kind = "gemm" if re.search(r"graph_\d+_kernel", name) else \
                    "deltanet" if re.search(r"cpp_fused.*(addcmul|exp|sigmoid|softplus)", name) else "other"
                kinds[kind] += ms
            print(f"\n{variant[0]} row(s), step states kept: {variant[1]}; wall median "
                  f"{1000 * statistics.median(times):.1f} ms; by kind (ms): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
            for name, ms, n in rows[:12]:
                print(f"  {ms:7.2f} ms  x{n:<4} {name[:100]}")


if __name__ == "__main__":
    main()
