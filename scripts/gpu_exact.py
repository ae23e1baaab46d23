"""Exactness on a GPU (scripts/gpu-check.sh): the embedded model on CUDA against transformers on CUDA (logits),
and speculative decoding against plain decoding for both rollbacks, greedy and sampled with shared noise:
eagerly for every k 1-4; compiled (CUDA graphs) and built ahead of time (AOTInductor packages, as on ZeroGPU;
bfloat16) for k = 2. Prints one line per check and exits 1 if any failed.

    python scripts/gpu_exact.py          # on CUDA
    python scripts/gpu_exact.py cpu      # a dry run of the script itself: the eager checks, and float32 built ahead of time
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from qwen.cache import State                         # noqa: E402
from qwen.chat import Chat                           # noqa: E402
from qwen.compiled import warm_up                    # noqa: E402
from qwen.model import Model                         # noqa: E402
from qwen.mtp import MTP, generate_mtp               # noqa: E402
from qwen.sample import generate                     # noqa: E402
from qwen.weights import find_model                  # noqa: E402

PROMPTS = ["In the beginning God created", "The :mod:`os` module provides", "春风"]


def main(device="cuda"):
    assert device == "cpu" or torch.cuda.is_available(), "no CUDA device"
    failed = 0

    def check(name, ok, detail=""):
        nonlocal failed
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}{' ' + detail if detail else ''}", flush=True)

    path = find_model()
    for dtype in (torch.float32, torch.bfloat16):
        model = Model.from_pretrained(path, dtype=dtype, device=device)
        head = MTP.from_pretrained(model.cfg, path, dtype=dtype, device=device, lm_head=model.lm_head)
        chat = Chat(model, path)
        if dtype == torch.float32:
            from transformers import AutoModelForCausalLM
            ref = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
            ids = chat.encode(PROMPTS[1]).to(device)
            with torch.inference_mode():
                want, got = ref(ids).logits, model(ids, State(model))
            gap = ((got - want).abs().max() / want.abs().max()).item()
            check(f"logits equal transformers on {device} (float32)", gap <= 1e-4, f"relative gap {gap:.2e}")
            del ref
        engines = [("eager", (model, head))]
        if device == "cuda":
            t0 = time.perf_counter()
            report = warm_up(model, head, ks=(2,), rollbacks=("select", "recompute"), keep_if_faster=False)
            print(f"     {dtype}: compiled {report['status']} in {time.perf_counter() - t0:.0f} s; "
                  f"strategy {report['model'].steps.strategy}", flush=True)
            engines.append(("compiled", (report["model"], report["head"])))
        if (device == "cuda") == (dtype == torch.bfloat16):
            t0 = time.perf_counter()
            report = warm_up(model, head, ks=(2,), keep_if_faster=False, ahead=True)
            print(f"     {dtype}: built ahead of time: {report['status']} in {time.perf_counter() - t0:.0f} s", flush=True)
            engines.append(("ahead-of-time", (report["model"], report["head"])))
        for label, (m, h) in engines:
            for prompt in PROMPTS:
                ids = chat.encode(prompt).to(device)
                for sampling in ({}, {"temperature": 0.7, "seed": 3}):
                    plain = generate(m, ids, 48, **sampling)
                    for k in ((1, 2, 3, 4) if label == "eager" else (2,)):
                        for rollback in (("select", "recompute") if label != "ahead-of-time" else ("select",)):
                            spec = generate_mtp(m, h, ids, 48, k=k, rollback=rollback, **sampling)[0]
                            check(f"{str(dtype)[6:]} {label} {'sampled' if sampling else 'greedy'} k={k} {rollback} "
                                  f"{prompt[:12]!r}", spec == plain)
    print(f"{failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
