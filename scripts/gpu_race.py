"""The embedded model's race through the app's own code path (demo.race.race: lanes taking turns, the
device-synchronised clock, the costs measured after it), as a visitor's default race runs it, on
whatever device QWEN_DEVICE / torch picks. Prints one JSON line per race (speed-up, predicted
speed-up, tokens per pass, identical) and the median. Used by scripts/gpu-check.sh.

    python scripts/gpu_race.py [races]       # default 5; eager (what ZeroGPU serves by default)

The GPU image has no Gradio; demo.prompts imports it only for UI helpers this script never calls, so
an empty stand-in module is installed where Gradio is missing.
"""
import json
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    import gradio  # noqa: F401
except ImportError:
    sys.modules["gradio"] = types.ModuleType("gradio")

from demo.models import ModelStore              # noqa: E402
from demo.prompts import prepare                # noqa: E402
from demo.race import race, summary             # noqa: E402
from demo.validate import LIMITS, RaceSettings  # noqa: E402


def main(races=5):
    t0 = time.perf_counter()
    loaded = ModelStore().get()
    print(f"loaded {loaded.key} on {loaded.plan} in {time.perf_counter() - t0:.1f} s", flush=True)
    ratios = []
    for temperature in (0.5, 0.0):                  # the page's default (sampled, shared noise), then greedy
        for i in range(races):
            settings = RaceSettings("In the beginning God created", LIMITS["max_new_tokens"][2], 2, "select",
                                    temperature, 0, True, False, [])
            ids, _ = prepare(loaded, settings)
            *_, last = race(loaded, ids, settings)
            s = summary(loaded.key, last.plain, last.spec, settings, measured=last.costs)
            row = {"temperature": temperature, "identical": s["identical"], "tokens": s["plain"]["tokens"],
                   "plain_s": s["plain"]["seconds"], "spec_s": s["speculative"]["seconds"],
                   "speedup": s["speedup"], "predicted": s.get("predicted_speedup"),
                   "tokens_per_pass": s["speculative"]["tokens_per_round"]}
            print(json.dumps(row), flush=True)
            if i:                                   # the first race of each setting warms up
                ratios.append((temperature, s["speedup"]))
        done = [r for t, r in ratios if t == temperature]
        print(f"temperature {temperature}: median speed-up {statistics.median(done):.2f}x "
              f"(range {min(done):.2f}-{max(done):.2f}) over {len(done)} warm races", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
