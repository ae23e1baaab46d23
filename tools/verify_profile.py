"""Where a compiled (frozen) verify pass of 2 rows of the 0.8B shape spends its time against a one-row step: the
graphs' own kernels timed one by one (inductor's kernel profiling), summed by kind.

    python -m tools.verify_profile        # random bfloat16 weights, k = 1's graphs, 2 threads; minutes

In the output, `graph_N_kernel` rows are the matrix products (inductor's C++ GEMM templates) and the
`graph_N_cpp_fused_...` rows with addcmul, exp, sigmoid or softplus in their names are the DeltaNet layers' memory updates.
A frozen compile autotunes its GEMMs, so two runs can differ in the GEMM rows; compare kinds within one run.
"""
import os
import re
import time
from collections import defaultdict

os.environ["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] = "1"        # before inductor reads its config

import torch                                                         # noqa: E402
from torch.profiler import ProfilerActivity, profile                 # noqa: E402

from qwen.bench import random_head, random_model                     # noqa: E402
from qwen.cache import State                                         # noqa: E402
from qwen.compiled import warm_up                                    # noqa: E402
from qwen.costs import Pass, time_pass                               # noqa: E402


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
    passes = [Pass(1), Pass(2, keep=True)]                  # a step; a verify pass of 2 rows keeping step states
    time_pass(fast, passes, repeats=0, warmup=3, state=state)
    for p in passes:
        wall = time_pass(fast, [p], repeats=7, warmup=0, state=state)[p]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            time_pass(fast, [p], repeats=5, warmup=0, state=state)
        rows = sorted(((e.key, e.self_cpu_time_total / 5000, e.count // 5) for e in prof.key_averages()),
                      key=lambda r: -r[1])
        kinds = defaultdict(float)
        for name, ms, _ in rows:
            kind = "gemm" if re.search(r"graph_\d+_kernel", name) else \
                "deltanet" if re.search(r"cpp_fused.*(addcmul|exp|sigmoid|softplus)", name) else "other"
            kinds[kind] += ms
        print(f"\n{p.rows} row(s), step states kept: {p.keep}; wall median "
              f"{1000 * wall:.1f} ms; by kind (ms): "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
        for name, ms, n in rows[:12]:
            print(f"  {ms:7.2f} ms  x{n:<4} {name[:100]}")


if __name__ == "__main__":
    main()
