"""The GPU check: every figure the page's GPU row needs, in steps that each write `<out>/<step>.json` as they go
(a step cut off by its time limit still leaves what it finished) and print one line per figure with the device,
torch's version and the dtype. `bash tools/gpu-check.sh` runs every step in its own process under its own limit.

    python -m tools.gpu_check [--out DIR] [--only STEP[,STEP]]      # on a CUDA host: everything, about 8 minutes
    python -m tools.gpu_check --dry-run [--out DIR]                 # the same steps on CPU, small: under 3 minutes
    python -m tools.gpu_check --summary --out DIR                   # every figure the step files hold, again

The steps, in the order the shell script runs them:
    exact    the embedded model: logits against transformers (float32); speculative == plain for k = 1-4, both
             rollbacks, greedy and sampled (shared noise), eagerly; then for k = 2 (the app's first k; k = 1-4
             compiled would not fit the time), compiled with CUDA graphs and built ahead of time (AOTInductor
             packages, ZeroGPU's way); float32 all through first (the dtype a small model runs in on a GPU),
             then bfloat16. Compiled k = 1-3 at the 0.8B shape is checked by the race step (identical).
    decode   the 0.8B shape in bfloat16 (random weights, qwen.bench.random_model): decode tok/s eagerly, with CUDA
             graphs and ahead of time, each beside the floor: the weights' bytes ÷ the card's memory bandwidth
             (from its memory clock and bus width; and as a device-to-device copy measures it), and the matmuls alone
    verify   the same shape: a verify of 2 / 3 / 4 tokens (keeping step states, as `select` verifies) in plain
             steps, eagerly and with CUDA graphs
    race     the same shape, drafts scripted from the greedy transcript (qwen.scripted) at hit 0.9 and 0.5, for
             k = 1, 2, 3 and k="auto": speed-up over plain (plain timed alternately), every lane checked identical,
             beside the page's prediction (qwen.bench.lane_terms: the cost model's terms, timed in lanes of
             their own); compiled with CUDA graphs for k = 1-3, as the app compiles for k="auto"
    memory   the same shape: GPU memory (torch.cuda.max_memory_allocated) after loading and at its peak decoding
             eagerly (plain, and k = 3), beside the weights' bytes, and the peaks the other steps recorded
    page     the embedded model's race through the app's own code (demo.race: lanes taking turns, the device's
             clock, the costs it predicts from), sampled at 0.5 and greedy, eager as ZeroGPU serves by default

--dry-run hides any GPU and runs the same steps on CPU: the 0.8B shape becomes a small one (DRY_SHAPE), fewer
tokens, one torch thread, and of the compiled engines only the decode step's one graph is compiled (the host's
strategy: streamed graphs on CPU, about 30 s on 2 cores); every other compiled lane (CUDA graphs, ahead of time) is
skipped, and its step file says so under "skipped". GPU memory is null there. About 1.5 minutes on 2 cores.

Not yet run on a GPU: the limits in gpu-check.sh are reckoned from the 2026-12-04 H200 run (docs/benchmarks.md);
where a step runs past its own, its file holds what it finished and the summary says CUT OFF.

Each step file: {"step", "device" (the GPU's name; "cpu"), "torch", "dry_run", "shape", "dtype" (the step's; each
figure has its own too), "figures": {name: {"value", "dtype", "unit", ...}}, "skipped": {what: why}, "errors",
"gpu_peak_bytes", "seconds", "finished"}. The exit status is 1 where a check failed or the step raised.
"""
import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

if "--dry-run" in sys.argv:                 # before torch loads: the dry run sees no GPU, wherever it runs
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402

STEPS = ("exact", "decode", "verify", "race", "memory", "page")
PROMPTS = ["In the beginning God created", "The :mod:`os` module provides", "春风"]
DRY_SHAPE = dict(vocab_size=4096, hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=2,
                 linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, max_position_embeddings=4096)
SHAPE_DTYPE = torch.bfloat16                # the 0.8B shape's dtype on a GPU (and in the dry run, for the same code)
COMPILED_KS = (1, 2, 3)                     # the 0.8B shape's graphs: decode, verify of 2-4 (k="auto" drafts 0-3)
RATES = (0.9, 0.5)
LANES = (1, 2, 3, "auto")


def dtype_name(dtype):
    return str(dtype).replace("torch.", "") if dtype is not None else None


class Step:
    """One step's file, written after every figure (so a step cut off leaves what it finished), and its lines."""

    def __init__(self, name, out, dry_run, shape=None, dtype=None):
        self.path = Path(out) / f"{name}.json"
        self.t0 = time.perf_counter()
        self.failed = 0
        cuda = torch.cuda.is_available()
        self.device = torch.cuda.get_device_name() if cuda else "cpu"
        self.data = {"step": name, "device": self.device, "torch": torch.__version__,
                     "cuda": torch.version.cuda if cuda else None, "python": sys.version.split()[0],
                     "cpu_capability": torch.backends.cpu.get_cpu_capability(), "dry_run": dry_run,
                     "shape": shape, "dtype": dtype_name(dtype), "figures": {}, "skipped": {}, "errors": [],
                     "gpu_peak_bytes": None, "seconds": 0.0, "finished": False}
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        self.write()

    def figure(self, name, value, dtype=None, unit="", ok=None, **extra):
        """Record and print one figure; ok=False counts as a failed check."""
        dtype = dtype_name(dtype) if dtype is not None else self.data["dtype"]
        self.data["figures"][name] = {"value": value, "dtype": dtype, "unit": unit,
                                      **({"ok": ok} if ok is not None else {}), **extra}
        if ok is False:
            self.failed += 1
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        mark = "" if ok is None else ("ok   " if ok else "FAIL ")
        more = "".join(f", {k} {v:.4g}" if isinstance(v, float) else f", {k} {v}" for k, v in extra.items()
                       if not isinstance(v, (dict, list)))
        print(f"[{self.data['step']}] {mark}{name}: {shown}{' ' + unit if unit else ''}{more}   "
              f"({self.device} · torch {torch.__version__} · {dtype})", flush=True)
        self.write()

    def skip(self, what, why):
        self.data["skipped"][what] = why
        print(f"[{self.data['step']}] skipped {what}: {why}", flush=True)
        self.write()

    def note(self, key, value):
        self.data[key] = value
        self.write()

    def error(self, what):
        self.failed += 1
        self.data["errors"].append(what)
        print(f"[{self.data['step']}] ERROR {what}", flush=True)
        self.write()

    def write(self):
        self.data["seconds"] = round(time.perf_counter() - self.t0, 2)
        if torch.cuda.is_available():
            self.data["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)

    def finish(self):
        self.data["finished"] = True
        self.data["failed"] = self.failed
        self.write()
        print(f"[{self.data['step']}] done in {self.data['seconds']:.0f} s, {self.failed} failed -> {self.path}",
              flush=True)
        return 1 if self.failed else 0


# --- models ------------------------------------------------------------------------------------------------

def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def shape_pair(dry_run, dtype=SHAPE_DTYPE, head=True):
    """The 0.8B shape with random weights as a checkpoint holds them (qwen.bench.random_model, random_head), on the
    GPU; in the dry run DRY_SHAPE, made the same way. -> (model, head or None, shape's name)"""
    from qwen import bench
    if not dry_run:
        model, _ = bench.random_model(dtype)
        return model, (bench.random_head(model.cfg, dtype) if head else None), "0.8B"
    from qwen.config import Config
    from qwen.model import Model
    from qwen.mtp import MTP
    torch.manual_seed(0)
    cfg = Config.from_dict(DRY_SHAPE)
    model = bench.as_checkpoint(Model(cfg).to(device(), dtype).eval().requires_grad_(False))
    mtp = bench.as_checkpoint(MTP(cfg).to(device(), dtype).eval().requires_grad_(False)) if head else None
    return model, mtp, "dry (hidden 128, 4 layers, vocab 4096)"


def prompt_ids(model, length=64):
    vocab = min(248000, model.cfg.vocab_size)
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1)).to(device())


def weight_bytes(*modules):
    seen, total = set(), 0
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel() * p.element_size()
    return total


def compiled(step, what, model, head=None, ks=COMPILED_KS, **how):
    """warm_up (qwen.compiled), every pass kept whatever its speed; its status, strategy and seconds as figures.
    -> (model view, head view) or None where it raised (the error recorded)."""
    from qwen.compiled import warm_up
    try:
        t = time.perf_counter()
        report = warm_up(model, head, ks=ks, keep_if_faster=False, **how)
        strategy = report["model"].steps.strategy
        step.figure(f"{what}: compile seconds", round(time.perf_counter() - t, 1), model.embed_tokens.weight.dtype,
                    "s", status=str(report["status"]), strategy=strategy.value if strategy else None)
        return report["model"], report["head"]
    except Exception as e:   # noqa: BLE001 - a compiled lane that cannot build is a figure, not the end of the step
        step.error(f"{what}: {type(e).__name__}: {e}")
        traceback.print_exc()
        return None


# --- the steps ---------------------------------------------------------------------------------------------

def step_exact(out, dry_run):
    """Logits against transformers; speculative == plain, eagerly for k 1-4, compiled and ahead of time for k 2."""
    from qwen.cache import State
    from qwen.chat import Chat
    from qwen.model import Model
    from qwen.mtp import MTP, generate_mtp
    from qwen.sample import generate
    from qwen.weights import EMBEDDED, find_model
    step = Step("exact", out, dry_run, "embedded")
    tokens = 24 if dry_run else 32
    path, dev = find_model(EMBEDDED), device()
    step.note("model", str(path))
    step.note("new_tokens", tokens)
    try:
        from transformers import AutoModelForCausalLM
        model = Model.from_pretrained(path, dtype=torch.float32, device=dev)
        ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev).eval()
        ids = Chat(model, path).encode(PROMPTS[1]).to(dev)
        with torch.inference_mode():
            want, got = ref(ids).logits, model(ids, State(model))
        gap = ((got - want).abs().max() / want.abs().max()).item()
        step.figure("logits against transformers: relative gap", gap, torch.float32, ok=gap <= 1e-4)
        del ref, model
    except ImportError as e:
        step.skip("logits against transformers", f"transformers is not installed: {e}")

    def matrix(label, dtype, model, head, ks, rollbacks):
        chat = Chat(model, path)
        plains, i = {}, 0
        for sampling in ({}, {"temperature": 0.7, "seed": 3}):
            for k in ks:
                for rollback in rollbacks:
                    prompt = PROMPTS[i % len(PROMPTS)]           # every prompt, in turn
                    i += 1
                    ids = chat.encode(prompt).to(dev)
                    key = (prompt, bool(sampling))
                    if key not in plains:
                        plains[key] = generate(model, ids, tokens, **sampling)
                    spec = generate_mtp(model, head, ids, tokens, k=k, rollback=rollback, **sampling)[0]
                    plain = plains[key]
                    parted = next((j for j, (a, b) in enumerate(zip(spec, plain)) if a != b), None)
                    how = "sampled" if sampling else "greedy"
                    step.figure(f"{label} {dtype_name(dtype)} {how} k={k} {rollback}: identical", spec == plain,
                                dtype, ok=spec == plain, prompt=prompt,
                                **({"parted_at": parted} if parted is not None else {}))

    # float32 first, compiled lanes included: the dtype a small model runs in on a GPU (a cut-off loses bfloat16)
    for dtype in (torch.float32, torch.bfloat16):
        model = Model.from_pretrained(path, dtype=dtype, device=dev)
        head = MTP.from_pretrained(model.cfg, path, dtype=dtype, device=dev, lm_head=model.lm_head)
        matrix("eager", dtype, model, head, (1, 2, 3, 4), ("select", "recompute"))
        for label, ahead, rollbacks in (("CUDA graphs", False, ("select", "recompute")),
                                        ("ahead of time", True, ("select",))):
            what = f"{label} {dtype_name(dtype)}"
            if dry_run:
                step.skip(what, "the dry run compiles only the decode step's graph (compiling on CPU takes minutes)")
                continue
            views = compiled(step, what, model, head, ks=(2,), rollbacks=rollbacks, ahead=ahead)
            if views is not None:
                matrix(label, dtype, *views, (2,), rollbacks)
    checks = [f for name, f in step.data["figures"].items() if name.endswith(": identical")]
    step.note("identical", all(f["value"] for f in checks))
    step.note("checks", len(checks))
    return step.finish()


def bandwidth(step, dtype):
    """The card's memory bandwidth in bytes/s: from its memory clock and bus width (as torch.cuda's GPULimits
    reckons it), and as a device-to-device copy measures it (on CPU: the copy only)."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties()
        clock, width = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
        if clock and width:
            step.figure("memory bandwidth (clock × bus)", 2 * width / 8 * clock * 1000 / 1e9, dtype, "GB/s",
                        memory_clock_khz=clock, bus_bits=width)
    n = (1 << 30) if torch.cuda.is_available() else (64 << 20)
    a = torch.empty(n, dtype=torch.uint8, device=device())
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(5):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        b.copy_(a)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    del a, b
    step.figure("memory bandwidth (a copy: read + write)", 2 * n / best / 1e9, dtype, "GB/s")


def decode_rate(model, ids, tokens):
    """Decode tok/s after the first new token (the prompt's pass not counted), and the tokens."""
    from qwen.bench import Stamps, sync
    from qwen.sample import generate_stream
    out, stamps = [], Stamps()
    sync()
    for tok in generate_stream(model, ids, max_new_tokens=tokens):
        sync()
        stamps.put(tok)
        out.append(tok)
    return stamps.decode_rate(skip=0), out


def step_decode(out, dry_run):
    from qwen.bench import matmul_floor
    from qwen.sample import generate
    model, _, shape = shape_pair(dry_run, head=False)
    dtype = model.embed_tokens.weight.dtype
    step = Step("decode", out, dry_run, shape, dtype)
    tokens = 24 if dry_run else 64
    ids = prompt_ids(model)
    weights = weight_bytes(model)
    step.figure("weights", weights, dtype, "bytes")
    bandwidth(step, dtype)
    floors = {}
    for name in ("memory bandwidth (clock × bus)", "memory bandwidth (a copy: read + write)"):
        if name in step.data["figures"]:
            floors[name] = step.data["figures"][name]["value"] * 1e9 / weights
            step.figure(f"floor: weights ÷ {name[len('memory '):]}", floors[name], dtype, "steps/s")
    step.figure("floor: the matmuls alone", 1 / matmul_floor(model), dtype, "steps/s")
    floor = next(iter(floors.values()))

    generate(model, ids, max_new_tokens=4)                              # warm
    eager_rate, eager = decode_rate(model, ids, tokens)
    step.figure("eager", eager_rate, dtype, "tok/s", of_floor=eager_rate / floor)
    engines = [("CUDA graphs" if torch.cuda.is_available() else "compiled", {},
                COMPILED_KS if not dry_run else ()),
               ("ahead of time", {"ahead": True}, ())]
    for label, how, ks in engines:
        if dry_run and how:
            step.skip(label, "the dry run compiles one graph: the decode step, with this host's strategy")
            continue
        views = compiled(step, label, model, ks=ks, **how)
        if views is None:
            continue
        fast = views[0]
        generate(fast, ids, max_new_tokens=4)
        rate, toks = decode_rate(fast, ids, tokens)
        step.figure(label, rate, dtype, "tok/s", of_floor=rate / floor, vs_eager=rate / eager_rate,
                    same_tokens=toks == eager)
        step.figure(f"{label}: the same tokens as eager", toks == eager, dtype, ok=toks == eager)
    return step.finish()


def step_verify(out, dry_run):
    from qwen.bench import verify_costs
    model, _, shape = shape_pair(dry_run, head=False)
    dtype = model.embed_tokens.weight.dtype
    step = Step("verify", out, dry_run, shape, dtype)
    engines = [("eager", model)]
    if dry_run:
        step.skip("CUDA graphs", "the dry run compiles only the decode step's graph")
    else:
        views = compiled(step, "CUDA graphs", model)
        if views is not None:
            engines.append(("CUDA graphs", views[0]))
    for label, m in engines:
        costs = verify_costs(m, COMPILED_KS)
        step.figure(f"{label}: a decode step", costs["step_s"] * 1000, dtype, "ms")
        for k in COMPILED_KS:
            step.figure(f"{label}: verify of {1 + k} tokens", costs[f"verify_{1 + k}_vs_step"], dtype, "steps")
    return step.finish()


def step_race(out, dry_run):
    from qwen.adaptive import DraftLengths
    from qwen.bench import best_of_pair, lane_terms
    from qwen.mtp import generate_mtp, lengths_for
    from qwen.sample import generate
    from qwen.scripted import ScriptedHead
    model, head, shape = shape_pair(dry_run)
    dtype = model.embed_tokens.weight.dtype
    step = Step("race", out, dry_run, shape, dtype)
    tokens = 32 if dry_run else 64
    ids = prompt_ids(model)
    if dry_run:
        step.skip("CUDA graphs", "the dry run races eagerly (compiling on CPU takes minutes)")
        step.note("engine", "eager")
    else:
        views = compiled(step, "CUDA graphs", model, head)
        if views is not None:
            model, head = views
        step.note("engine", "CUDA graphs" if views is not None else "eager (compiling failed)")
    generate(model, ids, max_new_tokens=4)
    plain = generate(model, ids, max_new_tokens=tokens)
    transcript = ids[0].tolist() + plain
    for k in LANES[:-1]:                 # a short run first, off the clock, per k
        generate_mtp(model, ScriptedHead(head, transcript, 0.5, seed=3), ids, 8, k=k)
    # k="auto" chooses by the seconds of a round of each length, measured once for this model and head (as the
    # page does with the real head), each run starting from what the rounds before it saw: a fresh chooser
    seconds = lengths_for(model, head, max(LANES[:-1])).seconds
    step.note("auto_round_seconds", [round(s, 6) for s in seconds])
    for rate in RATES:
        for k in LANES:
            def spec(k=k, rate=rate):
                scripted = ScriptedHead(head, transcript, rate, seed=3)
                lengths = DraftLengths(seconds) if k == "auto" else None
                result = generate_mtp(model, scripted, ids, tokens, k=k, rollback="select",
                                      **({"lengths": lengths} if lengths else {}))
                return result, lengths
            (plain_out, t_plain), ((result, lengths), t_spec) = best_of_pair(
                2, lambda: generate(model, ids, max_new_tokens=tokens), spec)
            spec_out, rounds, hits = result
            identical = spec_out == plain and plain_out == plain
            speedup = (len(spec_out) / t_spec) / (len(plain_out) / t_plain)
            page = lane_terms(model, ScriptedHead(head, transcript, rate, seed=3), ids, tokens, k, "select", {},
                              len(spec_out), rounds)
            extra = {"predicted": page["predicted_speedup"], "tokens_per_round": len(spec_out) / max(1, rounds),
                     "plain_tok_s": len(plain_out) / t_plain, "identical": identical, "terms_ms": page["terms_ms"]}
            if lengths is not None:
                extra["rounds_by_drafts"] = {str(m): n for m, n in sorted(lengths.counts.items())}
            else:
                extra["acceptance"] = hits / max(1, rounds * k)
            step.figure(f"hit {rate} k={k}: speed-up", speedup, dtype, "×", ok=identical, **extra)
    return step.finish()


def step_memory(out, dry_run):
    from qwen.mtp import generate_mtp
    from qwen.sample import generate
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model, head, shape = shape_pair(dry_run)
    dtype = model.embed_tokens.weight.dtype
    step = Step("memory", out, dry_run, shape, dtype)
    weights = weight_bytes(model, head)
    step.figure("weights (model and head)", weights, dtype, "bytes")
    step.figure("GPU memory after loading", torch.cuda.memory_allocated() if cuda else None, dtype, "bytes")
    ids = prompt_ids(model)
    tokens = 24 if dry_run else 64
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    generate(model, ids, max_new_tokens=tokens)
    generate_mtp(model, head, ids, tokens, k=3)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    step.figure("GPU memory peak, eager decoding (plain, k=3)", peak, dtype, "bytes",
                of_weights=peak / weights if peak else None)
    import resource
    step.figure("host memory peak (ru_maxrss, for scale)", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                dtype, "bytes")
    for other in ("decode", "verify", "race"):           # what the compiled steps peaked at, where they ran
        try:
            found = json.loads((Path(out) / f"{other}.json").read_text())
        except (OSError, ValueError):
            continue
        if found.get("gpu_peak_bytes") is not None:
            step.figure(f"GPU memory peak in the {other} step", found["gpu_peak_bytes"], found.get("dtype"), "bytes",
                        of_weights=found["gpu_peak_bytes"] / weights)
    return step.finish()


def step_page(out, dry_run):
    """The embedded model's race through the app's code, as a visitor's default race runs it (demo.race)."""
    import types
    os.environ.setdefault("QWEN_COMPILE", "0")             # eager, as ZeroGPU serves by default
    os.environ.setdefault("QWEN_RACE_REPEAT_SECONDS", "1" if dry_run else "3")
    os.environ["QWEN_MODEL"] = str(Path(__file__).resolve().parents[1] / "assets")     # the embedded model
    try:
        import gradio  # noqa: F401
    except ImportError:                  # a GPU image without Gradio: demo.prompts needs it only for UI helpers
        sys.modules["gradio"] = types.ModuleType("gradio")
    from demo.models import ModelStore
    from demo.prompts import prepare
    from demo.race import race, summary
    from demo.validate import RaceSettings
    try:
        from demo.choices import LIMITS
    except ImportError:                  # before the visitor's choices had a module of their own
        from demo.validate import LIMITS
    t = time.perf_counter()
    loaded = ModelStore().get()
    dtype = loaded.model.embed_tokens.weight.dtype
    step = Step("page", out, dry_run, "embedded", dtype)
    step.note("plan", str(loaded.plan))
    step.note("load_seconds", round(time.perf_counter() - t, 2))
    prompt = "In the beginning God created"
    for temperature, label in ((None, "warm-up"), (0.5, "sampled 0.5"), (0.0, "greedy")):
        settings = RaceSettings(prompt, LIMITS["max_new_tokens"][2], 2, "select", temperature or 0.0, 0, True, False,
                                [])
        ids, _ = prepare(loaded, settings)
        warm = temperature is None
        *_, last = race(loaded, ids, settings, measure_costs=not warm, repeat=not warm)
        if warm:
            continue
        s = summary(loaded.key, last.plain, last.lanes, settings, lane_costs=last.lane_costs, speedups=last.speedups)
        step.figure(f"race, {label}, k=2 select: speed-up", s["speedup"], dtype, "×", ok=s["identical"],
                    predicted=s.get("predicted_speedup"), speedup_range=s["speedup_range"], races=s["races"],
                    identical=s["identical"], tokens=s["plain"]["tokens"], plain_s=s["plain"]["seconds"],
                    tokens_per_round=s["speculative"]["tokens_per_round"])
    return step.finish()


RUN = {"exact": step_exact, "decode": step_decode, "verify": step_verify, "race": step_race,
       "memory": step_memory, "page": step_page}


def summarise(out):
    """Every figure the step files in `out` hold, one line each, and whether each step finished."""
    for name in STEPS:
        path = Path(out) / f"{name}.json"
        if not path.exists():
            print(f"[{name}] no file: not run")
            continue
        data = json.loads(path.read_text())
        print(f"[{name}] {data['device']} · torch {data['torch']} · {data['shape']} · "
              f"{'finished' if data['finished'] else 'CUT OFF'} after {data['seconds']:.0f} s, "
              f"{len(data['figures'])} figures, {data.get('failed', '?')} failed, {len(data['skipped'])} skipped")
        checks = [f for fig, f in data["figures"].items() if fig.endswith(": identical")]
        if checks:                                           # the exactness checks: a count, and failures one by one
            print(f"    speculative == plain: {sum(bool(f['value']) for f in checks)} of {len(checks)} checks")
        for fig, f in data["figures"].items():
            if fig.endswith(": identical") and f["value"]:
                continue
            v = f["value"]
            shown = f"{v:.4g}" if isinstance(v, float) else "null" if v is None else v
            print(f"    {fig}: {shown} {f['unit']} ({f['dtype']})"
                  + (f", predicted {f['predicted']:.3g}" if isinstance(f.get("predicted"), float) else ""))
        for err in data["errors"]:
            print(f"    ERROR {err}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="on CPU, small: the same steps (under 3 minutes)")
    parser.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpu-check"),
                        help="folder for <step>.json")
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps, of {','.join(STEPS)}")
    parser.add_argument("--summary", action="store_true", help="print what the step files in --out hold, and stop")
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.summary:
        summarise(args.out)
        return 0
    steps = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in steps if s not in RUN]
    if unknown:
        parser.error(f"unknown steps {unknown}; the steps: {', '.join(STEPS)}")
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device here: run on a GPU, or --dry-run")
    if args.dry_run:
        torch.set_num_threads(1)         # a small model on a shared CPU: one thread is many times faster than two
    failed = 0
    for name in steps:
        try:
            failed += RUN[name](args.out, args.dry_run)
        except Exception as e:    # noqa: BLE001 - the next step runs; its file says it did not finish, and why
            traceback.print_exc()
            failed += 1
            path = Path(args.out) / f"{name}.json"
            try:
                data = json.loads(path.read_text())
                data["errors"].append(f"raised {type(e).__name__}: {e}")
                path.write_text(json.dumps(data, indent=1, default=str))
            except (OSError, ValueError):
                pass
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
