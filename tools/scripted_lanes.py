"""Plain decoding against scripted speculative decoding (k = 1, 2; hit 0.9, 0.5), as a user calls them: the scripts
in this folder that compile the 0.8B shape end with it (frozen_gemms.py, verify_select.py)."""
import statistics
import time

from qwen.mtp import generate_mtp
from qwen.sample import generate
from qwen.scripted import ScriptedHead


def scripted_speedups(model, head, ids, new_tokens=48, repeats=3):
    """Plain decoding, then each scripted lane, `repeats` times in turn; prints each lane's median speed-up over
    the plain run of its turn. Every lane must give plain decoding's tokens (AssertionError otherwise)."""
    plain = generate(model, ids, new_tokens)
    transcript = ids[0].tolist() + plain
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        generate(model, ids, new_tokens)
        plain_s = time.perf_counter() - t
        for k in (1, 2):
            for rate in (0.9, 0.5):
                t = time.perf_counter()
                out, _, _ = generate_mtp(model, ScriptedHead(head, transcript, rate, seed=3), ids, new_tokens, k=k)
                assert out == plain, "speculative decoding must give plain decoding's tokens"
                runs.append((k, rate, plain_s / (time.perf_counter() - t)))
    for k in (1, 2):
        for rate in (0.9, 0.5):
            xs = [x for kk, r, x in runs if (kk, r) == (k, rate)]
            print(f"k={k} hit {rate}: {statistics.median(xs):.2f}x plain ({', '.join(f'{x:.2f}' for x in xs)})")
