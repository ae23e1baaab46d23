"""Benchmarks, measured as ratios within one run (these machines are noisy; never from timed tests).

    python -m qwen.bench engine [--dtype float32|bfloat16] [--compile]
        random weights of the real Qwen3.5-0.8B shape: batch-1 greedy decode tok/s (64-token prompt,
        128 new tokens; steps after the first token, so prefill is not counted) of this engine and of
        transformers' generate on the same weights, their ratio,
        the weight-matmul floor, prefill tok/s for a 1024-token prompt, peak memory. With --compile
        also the compiled engine (qwen.compiled): compile seconds, decode tok/s, its ratio to eager and
        to transformers, verify of 1+k tokens (k in --ks) / one step, peak memory after compiling.
    python -m qwen.bench spec --scripted [--dtype bfloat16] [--repeats N] [--no-draft-vocab] [--hand-set]
        the visitor's path: the stand-in for Qwen/Qwen3.5-0.8B (qwen.standin: hub layout, real config and
        tokenizer, random weights; built once) loaded as the app loads it (the host plan's dtype, the draft
        vocabulary the loader applies), one lane per real text (English, Chinese: its first 64 tokens the
        prompt); drafts replayed from the greedy transcript at acceptance 0.5 / 0.7 / 0.9, missing wherever
        the text's token lies outside the draft vocabulary (qwen.scripted; --hand-set: the earlier random
        weights, random ids and first-32768-ids vocabulary, not the app's path): speed-up over plain per k and rollback (with --repeats, medians of N runs of
        each, plain and speculative alternating) and the speed-up the page's cost model predicts, each lane's
        terms in ms (prompt pass, step and the work around it; a round's draft, snapshot, verify, restore,
        catch_up and the work around it: qwen.costs, timed in lanes of their own), plus the cost of verifying
        1+k tokens and of one draft step relative to one main step, snapshot/restore time and bytes.
    python -m qwen.bench spec [--model PATH_OR_ID] [--no-draft-vocab] [--temperature T [--seed S] [--rejection]]
        a real checkpoint (default: the embedded demo; its draft_vocab.json applies unless
        --no-draft-vocab), greedy or sampled (shared noise from --seed; --rejection: the textbook
        rule): per prompt, plain vs speculative tokens, seconds (the best of 3 runs
        each, plain and speculative alternating), tok/s, rounds, hits, acceptance, what a round cost
        in plain steps, identical?, and the speed-up the cost model predicts (qwen.costs, its terms
        measured in lanes of their own: predicted_speedup, terms_ms) — for each rollback and k; then a
        step, a verify of 1+k tokens and a draft pass timed one by one.
    python -m qwen.bench compile [--model PATH_OR_ID | --shape 0.8b] [--ks 2]
        seconds to compile every pass of k-draft decoding, in a fresh process with an empty cache
        ("first") and again in another fresh process with that cache ("cached"); ready_s: until the
        passes plain and greedy speculative decoding use were compiled, checked and serving.
--compile works in every mode (--no-compile, the default, stays eager). Every table is printed with
the CPU capability torch uses here (AVX2, AVX512, ...): speed claims depend on it. Every mode runs
on CUDA when there is one (timings synchronise the device).
"""
import argparse
import json
import resource
import statistics
import time

import torch

from qwen.cache import AttentionState, State, restore_state, snapshot_bytes, snapshot_state
from qwen.compiled import warm_up
from qwen.compiled.streamed import eager_weight
from qwen.config import Config
from qwen.costs import TABLE, Pass, measure, predict, time_pass
from qwen.model import Model, load_into
from qwen.mtp import MTP, engine_race, generate_mtp, prompt_passes
from qwen.sample import generate, generate_stream

QWEN35_08B = dict(vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                  linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                  linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  max_position_embeddings=32768)
DRAFT_VOCAB = 32768          # FR-Spec subset size for the draft's output layer
ROLLBACKS_RUN = ["select", "recompute"]

PROMPTS = [   # held-out style prompts for the embedded model (Python docs, KJV, classical poetry)
    ":mod:`json` --- JSON encoder and decoder\n=======================================\n\n",
    "The :func:`open` function returns a file object. ",
    "In the beginning God created the heaven and the earth. And",
    "床前明月光，",
    "def fibonacci(n):\n    ",
    "What is the capital of France?",
]


def peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def resident_gb():
    """This process's resident memory now (Linux), or None: unlike the peak, it leaves out what
    compiling needed only for a while."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return None


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, *args, **kw):
    sync()
    t = time.perf_counter()
    out = fn(*args, **kw)
    sync()
    return out, time.perf_counter() - t


def best_of_pair(n, a, b):
    """timed() n times each for two functions run alternately (a, b, a, b, ...), so that a slow moment of
    this shared machine falls on both sides of a ratio; the shortest run of each is the least disturbed.
    -> ((a's output, its shortest seconds), (b's, its shortest))"""
    runs = [(timed(a), timed(b)) for _ in range(n)]
    return tuple((runs[0][i][0], min(r[i][1] for r in runs)) for i in (0, 1))


def random_model(dtype, with_reference=False, seed=0):
    """A model of the 0.8B shape with random weights held as a checkpoint holds them (as_checkpoint), and
    the reference sharing them, if asked."""
    torch.manual_seed(seed)
    cfg = Config.from_dict(QWEN35_08B)
    ref = None
    if with_reference:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
        ref_cfg = dict(QWEN35_08B, rope_parameters=dict(rope_type="default", rope_theta=1e7,
                                                        partial_rotary_factor=0.25))
        ref = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**ref_cfg)).to(DEVICE, dtype).eval()
        weights = {k[len("model."):]: v for k, v in ref.state_dict().items() if k.startswith("model.")}
        with torch.device("meta"):
            model = Model(cfg)
        load_into(model, weights, "reference", skip={"lm_head.weight"})      # the same tensors, no copy
        model.lm_head.weight = model.embed_tokens.weight
    else:
        model = Model(cfg).to(DEVICE, dtype)
    return as_checkpoint(model.eval().requires_grad_(False)), ref


def random_head(cfg, dtype):
    """An MTP head of the model's shape with random weights, held as the checkpoint holds them."""
    return as_checkpoint(MTP(cfg).to(DEVICE, dtype).eval().requires_grad_(False))


def as_checkpoint(module):
    """Round every weight to bfloat16 in place, as Qwen3.5's checkpoints store them, so that a float32
    model of random weights holds what a real one loaded as float32 holds: values a bfloat16 copy keeps
    exactly (which is what lets qwen.compiled stream them in bfloat16). -> module"""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    return module


def matmul_floor(model, reps=3):
    """Seconds of one decode step's weight matmuls alone (a lower bound for a step)."""
    dtype = model.embed_tokens.weight.dtype
    weights = [eager_weight(m) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(1, w.shape[1], dtype=dtype, device=DEVICE) for w in weights}  # (1, in)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(reps):
            sync()
            t = time.perf_counter()
            for w in weights:
                torch.nn.functional.linear(inputs[w.shape[1]], w)
            sync()
            best = min(best, time.perf_counter() - t)
    return best


class Stamps:
    """A transformers streamer (and a plain callback) that notes when each new token arrives."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass

    def decode_rate(self, skip=1):
        """Tokens per second after the first new token (so the prompt's prefill is not counted)."""
        t = self.times[skip:]
        return (len(t) - 1) / (t[-1] - t[0])


def bench_engine(args):
    dtype = getattr(torch, args.dtype)
    model, ref = random_model(dtype, with_reference=not args.no_reference)
    ids = torch.randint(0, 248000, (1, 64), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    generate(model, ids, max_new_tokens=4)                                 # warm-up
    ours, stamps = [], Stamps()
    for tok in generate_stream(model, ids, max_new_tokens=args.new_tokens):
        stamps.put(tok)
        ours.append(tok)
    rows = {"dtype": args.dtype, "engine_tok_s": stamps.decode_rate(skip=0)}
    floor = matmul_floor(model)
    rows["matmul_floor_steps_s"] = 1 / floor
    rows["engine_vs_floor"] = rows["engine_tok_s"] * floor
    if ref is not None:
        with torch.inference_mode():
            ref.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
            theirs = Stamps()                                              # its first put() is the prompt
            out = ref.generate(ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                               do_sample=False, pad_token_id=0, streamer=theirs)
        rows.update(reference_tok_s=theirs.decode_rate(skip=1),
                    same_tokens=out[0, ids.shape[1]:].tolist() == ours)
        rows["ratio"] = rows["engine_tok_s"] / rows["reference_tok_s"]
    long = torch.randint(0, 248000, (1, 1024), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    with torch.inference_mode():
        _, t_pre = timed(model, long, State(model), last_only=True)
    rows.update(prefill_tok_s=1024 / t_pre, peak_memory_gb=peak_gb())
    if args.compile:
        ks = [int(k) for k in args.ks.split(",")]
        report = warm_up(model, ks=ks, keep_if_faster=False, freeze=args.freeze, ahead=args.ahead)
        rows.update(compile_s=report["seconds"], compile_status=str(report["status"]))
        fast = report["model"]
        compiled, stamps = [], Stamps()
        for tok in generate_stream(fast, ids, max_new_tokens=args.new_tokens):
            stamps.put(tok)
            compiled.append(tok)
        rows.update(compiled_tok_s=stamps.decode_rate(skip=0), compiled_same_tokens=compiled == ours)
        rows["compiled_vs_eager"] = rows["compiled_tok_s"] / rows["engine_tok_s"]
        if "reference_tok_s" in rows:
            rows["compiled_vs_reference"] = rows["compiled_tok_s"] / rows["reference_tok_s"]
        rows.update({f"compiled_{key}": v for key, v in verify_costs(fast, ks).items()})
        rows["peak_memory_compiled_gb"] = peak_gb()
    return rows


def verify_costs(model, ks, reps=5):
    """Median seconds of one decode step, and a verify pass of 1+k tokens (keeping step states, as
    `select` does) relative to it."""
    seconds = time_pass(model, [Pass(1)] + [Pass(1 + k, keep=True) for k in ks], repeats=reps)
    step = seconds[Pass(1)]
    return {"step_s": step, **{f"verify_{1 + k}_vs_step": seconds[Pass(1 + k, keep=True)] / step for k in ks}}


def step_costs(model, head, ks, reps=5):
    """Median seconds: one main step, a verify of 1+k tokens, one draft step; snapshot/restore."""
    with torch.inference_mode():
        state = State(model)
        model(torch.randint(0, min(1000, model.cfg.vocab_size), (1, 64), device=DEVICE), state, last_only=True)
        snap = snapshot_state(state)

        def med(fn):
            times = []
            for _ in range(reps):
                restore_state(state, snap)
                times.append(timed(fn)[1])
            return statistics.median(times)
        out = verify_costs(model, ks)
        step = out["step_s"]
        h = torch.randn(1, 64, model.cfg.hidden_size, dtype=model.embed_tokens.weight.dtype, device=DEVICE)
        cache = AttentionState()
        head(model.embed_tokens(torch.arange(64, device=DEVICE)[None] % model.cfg.vocab_size), h, 0, cache)

        def draft():            # one head pass and its (FR-Spec) output layer, as generate_mtp pays it
            cache.truncate(64)
            head.draft(model, h[:, :1], torch.tensor([[7]], device=DEVICE), 64, cache)
        out["draft_vs_step"] = med(draft) / step
        out["snapshot_s"] = statistics.median(timed(snapshot_state, state)[1] for _ in range(reps))
        out["restore_s"] = statistics.median(timed(restore_state, state, snap)[1] for _ in range(reps))
        out["snapshot_bytes"] = snapshot_bytes(snap)
    return out


def lane_terms(model, head, ids, max_new_tokens, k, rollback, sampling, tokens, rounds):
    """What the page's cost model (qwen.costs) says of a speculative lane of `tokens` tokens in `rounds` rounds:
    its terms (the one cost table's, qwen.costs.TABLE, else measured now in lanes of their own and kept), with
    this prompt's pass, and the speed-up they predict. -> {"predicted_speedup",
    "terms_ms": {term: ms}}: prefill / prefill_spec (each lane's prompt pass), step and plain_around (a plain token),
    then a round's draft (the head's passes for d2..dk), snapshot (snapshots or step-state keeping), verify, restore
    (the rollback's select or restore and re-run), catch_up (the head's pass over the kept tokens, guessing the next
    d1), whole (a round run as one call, else 0: then the others are not timed) and
    round_around (the work around a round), per_token (per token it emits)."""
    lane = (k, rollback, "")
    kept = TABLE.get(model, head, k, rollback, sampling) or \
        TABLE.put(model, head, k, rollback, measure(engine_race(model, head, ids, max_new_tokens, [lane], sampling),
                                                    [lane])[0], sampling)
    terms = TABLE.with_prompt_pass(kept, ids, prompt_passes(model, head, ids, k, rollback, sampling))
    rolled_back = terms.samples["rolled_back"]
    restore = rolled_back * terms.back + (1 - rolled_back) * terms.keep
    return {"predicted_speedup": predict(terms, (tokens - 1) / max(1, rounds), rolled_back, tokens=tokens,
                                         rounds=rounds),
            "terms_ms": {key: round(1000 * v, 3) for key, v in [
                ("prefill", terms.prefill), ("prefill_spec", terms.prefill_spec), ("step", terms.step),
                ("plain_around", terms.plain_around), ("draft", terms.draft), ("snapshot", terms.snapshot),
                ("verify", terms.verify), ("restore", restore), ("catch_up", terms.catch_up), ("whole", terms.whole),
                ("round_around", terms.round_around), ("per_token", terms.per_token)]}}


def scripted_setup(args):
    """The model, head and lanes `spec --scripted` races. -> (model, head, [(name, prompt ids (1, P), text ids or
    None)], how it was loaded)

    By default the visitor's path: the stand-in for Qwen/Qwen3.5-0.8B (qwen.standin: the hub's layout, the real
    config and tokenizer, random weights) loaded as the app loads a hub checkpoint, in the dtype the host plan picks
    (--dtype overrides it) with the draft vocabulary the loader applies (--no-draft-vocab: none), one lane per real
    text (qwen.standin.real_texts): its first --prompt-tokens tokens are the prompt, and a draft misses wherever the
    text's token lies outside the draft vocabulary. --hand-set: the earlier configuration, random weights made here,
    random prompt ids and the first 32768 ids as the draft vocabulary, whatever the text: not the app's path."""
    from tokenizers import Tokenizer

    from qwen.compiled import default_dtype
    from qwen.standin import QWEN35_08B, real_texts, standin_folder
    if args.hand_set:
        dtype = getattr(torch, args.dtype or "bfloat16")
        model, _ = random_model(dtype)
        head = random_head(model.cfg, dtype)
        if args.draft_vocab:            # random weights: any subset will do; --no-draft-vocab: every token
            head.set_draft_vocab(list(range(min(DRAFT_VOCAB, model.cfg.vocab_size))), model.lm_head)
        ids = torch.randint(0, min(248000, model.cfg.vocab_size), (1, 64),
                            generator=torch.Generator().manual_seed(1)).to(DEVICE)
        return model, head, [("random ids", ids, None)], f"hand-set (not the app's path): {args.dtype or 'bfloat16'}"
    folder = standin_folder()
    dtype, why = (getattr(torch, args.dtype), "--dtype") if args.dtype else \
        default_dtype(DEVICE, QWEN35_08B["hidden_size"])
    model = Model.from_pretrained(folder, dtype=dtype, device=DEVICE)
    head = MTP.from_pretrained(model.cfg, folder, dtype=dtype, device=DEVICE,
                               lm_head=model.lm_head if args.draft_vocab else None)
    tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")
    lanes = []
    for name, text in real_texts().items():
        ids = tokenizer.encode(text).ids
        lanes.append((name, torch.tensor([ids[:args.prompt_tokens]], device=DEVICE), ids))
    draft = "every token" if head.draft_vocab is None else \
        f"{len(head.draft_vocab)} of {model.cfg.vocab_size} tokens ({head.draft_source})"
    return model, head, lanes, f"the visitor's path: {folder}, {str(dtype).replace('torch.', '')} ({why}), " \
        f"drafts scored over {draft}"


def bench_scripted(args):
    from qwen.scripted import ScriptedHead
    model, head, lanes, loaded = scripted_setup(args)
    print(loaded)
    ks = [int(k) for k in args.ks.split(",")]
    rollbacks = ROLLBACKS_RUN if 1 in ks else ["select"]          # recompute runs only with k = 1 below
    resident_before = resident_gb()
    compiling = warm_up(model, head, ks=ks, rollbacks=rollbacks, keep_if_faster=False,
                        freeze=args.freeze, ahead=args.ahead) if args.compile else {}
    eager_model = model
    model, head = compiling.get("model", model), compiling.get("head", head)       # the compiled views
    resident_compiled = resident_gb()
    rows, terms, plain_rates_by_text, eager_plain_tok_s = [], [], {}, None
    for name, ids, text in lanes:
        generate(model, ids, max_new_tokens=4)
        if args.compile and not plain_rates_by_text:              # the same plain decoding, eagerly, for scale
            eager, t_eager = timed(generate, eager_model, ids, max_new_tokens=args.new_tokens)
            eager_plain_tok_s = len(eager) / t_eager
        plain, t_plain = timed(generate, model, ids, max_new_tokens=args.new_tokens)
        transcript = ids[0].tolist() + plain

        def scripted(rate):
            return ScriptedHead(head, transcript, rate, seed=3, text=text)
        for k in ks:                    # as plain decoding above: a short run first, off the clock, per k
            generate_mtp(model, scripted(0.5), ids, 8, k=k)
        configs = [(float(rate), k, rollback) for rate in args.rates.split(",") for k in ks
                   for rollback in (ROLLBACKS_RUN if k == 1 else ["select"])]
        plain_rates, outcomes = [len(plain) / t_plain], {}
        rates, ratios = {c: [] for c in configs}, {c: [] for c in configs}      # tok/s; ÷ the plain run beside it
        for rep in range(args.repeats):  # --repeats: every run again; medians below
            for rate, k, rollback in configs:
                # subtle: each run beside a plain run of its own, and its speed-up that pair's ratio: this host's
                # step runs in a fast and a slow mode for tens of seconds at a time (docs/benchmarks.md, 12-07)
                again, t = timed(generate, model, ids, max_new_tokens=args.new_tokens)
                plain_rates.append(len(again) / t)
                lane = scripted(rate)
                (out, rounds, hits), t = timed(generate_mtp, model, lane, ids, args.new_tokens, k=k, rollback=rollback)
                rates[(rate, k, rollback)].append(len(out) / t)
                ratios[(rate, k, rollback)].append(rates[(rate, k, rollback)][-1] / plain_rates[-1])
                identical = outcomes.get((rate, k, rollback), (True,))[0] and out == plain     # every repeat's
                outcomes[(rate, k, rollback)] = identical, hits / max(1, rounds * k), len(out), rounds, lane.outside
        plain_tok_s = plain_rates_by_text[name] = statistics.median(plain_rates)
        kept = None if head.draft_vocab is None or text is None else set(head.draft_vocab.tolist())
        covered = None if kept is None else \
            sum(t in kept for t in text[:ids.shape[1] + args.new_tokens]) / len(text[:ids.shape[1] + args.new_tokens])
        for (rate, k, rollback), (identical, acceptance, tokens, rounds, outside) in outcomes.items():
            tok_s = statistics.median(rates[(rate, k, rollback)])
            rows.append({"text": name, "coverage": covered, "hit_rate": rate, "k": k, "rollback": rollback,
                         "identical": identical, "acceptance": acceptance, "missed_outside": outside,
                         "tokens_per_round": tokens / max(1, rounds), "tok_s": tok_s,
                         "speedup": statistics.median(ratios[(rate, k, rollback)])})
            # what the page's cost model predicts for this lane, from terms timed in lanes of their own
            lane = lane_terms(model, scripted(rate), ids, args.new_tokens, k, rollback, {}, tokens, rounds)
            rows[-1]["predicted_speedup"] = lane["predicted_speedup"]
            terms.append({"text": name, "hit_rate": rate, "k": k, "rollback": rollback, **lane["terms_ms"]})
    return {"loaded": loaded, "dtype": str(model.embed_tokens.weight.dtype).replace("torch.", ""),
            "plain_tok_s": plain_rates_by_text, "repeats": args.repeats,
            "eager_plain_tok_s": eager_plain_tok_s,
            "runs": rows, "terms_ms": terms, "costs": step_costs(model, head, ks), "peak_memory_gb": peak_gb(),
            "resident_gb": {"before_compiling": resident_before, "after_compiling": resident_compiled,
                            "at_the_end": resident_gb()},
            "compile_s": compiling.get("seconds"), "compile_status": str(compiling.get("status", "eager")),
            "compiled_speedups": compiling.get("speedups"),
            "strategy": model.steps.strategy.name.lower() if args.compile else None,
            "strategy_why": model.steps.why if args.compile else None}


def bench_model(args):
    from qwen.chat import Chat
    from qwen.weights import find_model
    path = find_model(args.model)
    dtype = getattr(torch, args.dtype)
    model = Model.from_pretrained(path, dtype=dtype, device=DEVICE)
    head = MTP.from_pretrained(model.cfg, path, dtype=dtype, device=DEVICE,
                              lm_head=model.lm_head if args.draft_vocab else None)
    chat = Chat(model, path)
    draft = "every token" if head.draft_vocab is None else f"{len(head.draft_vocab)} tokens (draft_vocab.json)"
    print(f"drafts scored over {draft} of {model.cfg.vocab_size}")
    ks = [int(k) for k in args.ks.split(",")]
    compiling = warm_up(model, head, ks=ks, rollbacks=ROLLBACKS_RUN, keep_if_faster=False, freeze=args.freeze,
                        ahead=args.ahead) if args.compile else {}
    model, head = compiling.get("model", model), compiling.get("head", head)       # the compiled views
    prompts = PROMPTS if not args.prompts else [p for p in open(args.prompts, encoding="utf-8").read().split("\n\n") if p]
    rows = []
    sampling = {}
    if args.temperature:
        sampling = dict(temperature=args.temperature, seed=args.seed) if not args.rejection else \
            dict(temperature=args.temperature, generator=torch.Generator().manual_seed(args.seed))
    # with a compiled round graph (small models), `select` is also timed with rounds step by step
    round_graphs = getattr(head, "rounds", None)                  # a compiled view's round graphs, or None
    fused = round_graphs is not None and round_graphs.enabled
    for prompt in prompts:
        ids = chat.encode_chat([{"role": "user", "content": prompt}], enable_thinking=False) if args.chat \
            else chat.encode(prompt)
        generate(model, ids, max_new_tokens=2)
        for rollback, one_graph in [("recompute", False), ("select", fused)] + ([("select", False)] if fused else []):
            for k in ks:
                if fused:
                    round_graphs.enabled = one_graph
                # plain decoding re-timed beside every setting, the two alternating
                (plain, t_plain), ((spec, rounds, hits), t) = best_of_pair(
                    3, lambda: generate(model, ids, args.max_new_tokens, chat.stop, **sampling),
                    lambda: generate_mtp(model, head, ids, args.max_new_tokens, chat.stop, k=k, rollback=rollback,
                                         **sampling))
                label = rollback + (" (one graph)" if one_graph else " (step by step)" if fused and rollback == "select" else "")
                rows.append({"prompt": prompt[:40], "rollback": label, "k": k, "tokens": len(spec),
                             "plain_s": t_plain, "spec_s": t, "plain_tok_s": len(plain) / t_plain,
                             "spec_tok_s": len(spec) / t, "rounds": rounds, "hits": hits,
                             "acceptance": hits / max(1, rounds * k), "speedup": t_plain / t * len(spec) / max(1, len(plain)),
                             # a round in plain steps (prefill counted on both sides): tokens per round ÷ this ≈ the speed-up
                             "round_in_steps": (t / max(1, rounds)) / (t_plain / max(1, len(plain))),
                             "identical": spec == plain})
                rows[-1].update(lane_terms(model, head, ids, args.max_new_tokens, k, rollback, sampling, len(spec),
                                           rounds))
    if round_graphs is not None:
        round_graphs.enabled = fused
    summary = {}
    for r in rows:
        s = summary.setdefault(f"{r['rollback']} k={r['k']}", {"acceptance": [], "speedup": [], "round": [],
                                                                "predicted": [], "identical": True})
        s["acceptance"].append(r["acceptance"]); s["speedup"].append(r["speedup"]); s["round"].append(r["round_in_steps"])
        s["predicted"].append(r["predicted_speedup"])
        s["identical"] &= r["identical"]
    summary = {key: {"mean_acceptance": statistics.mean(v["acceptance"]), "mean_speedup": statistics.mean(v["speedup"]),
                     "median_round_in_steps": statistics.median(v["round"]),
                     "mean_predicted_speedup": statistics.mean(v["predicted"]), "all_identical": v["identical"]}
               for key, v in summary.items()}
    return {"model": path, "dtype": args.dtype, "rows": rows, "summary": summary,
            "sampling": ("rejection" if args.rejection else "shared noise") + f", T={args.temperature}"
            if args.temperature else "greedy",
            "costs": step_costs(model, head, ks, reps=15),
            "compile_s": compiling.get("seconds"), "compile_status": str(compiling.get("status", "eager"))}


def bench_compile(args):
    """Compile seconds in a fresh process with an empty cache, then in another one with that cache."""
    import os
    import subprocess
    import sys
    import tempfile
    cache = tempfile.mkdtemp(prefix="qwen-compile-")
    code = ("import json, sys, torch; from qwen.bench import load_for_compile; from qwen.compiled import warm_up; "
            f"model, head = load_for_compile({args.model!r}, {args.shape!r}, {args.dtype!r}); "
            f"report = warm_up(model, head, ks={[int(k) for k in args.ks.split(',')]}, keep_if_faster=False, "
            f"freeze={args.freeze!r}, ahead={args.ahead!r}); del report['model'], report['head']; print(json.dumps(report, default=str))")
    env = dict(os.environ, QWEN_COMPILE_CACHE=cache, TORCHINDUCTOR_CACHE_DIR=cache)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    rows = []
    for run in ("first", "cached"):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr[-2000:])
        report = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"run": run, "compile_s": report["seconds"], "ready_s": report.get("ready_seconds"),
                     "process_s": time.perf_counter() - t, "status": report["status"],
                     "step_speedup": report["step_speedup"]})
    return {"model": args.model or args.shape or "embedded", "ks": args.ks, "cache": cache, "rows": rows}


def load_for_compile(model, shape, dtype):
    """The model and head bench_compile compiles: a checkpoint, or random weights of the 0.8B shape."""
    dtype = getattr(torch, dtype or "float32")
    if shape == "0.8b":
        m, _ = random_model(dtype)
        return m, random_head(m.cfg, dtype)
    from qwen.weights import find_model
    path = find_model(model)
    m = Model.from_pretrained(path, dtype=dtype, device=DEVICE)
    return m, MTP.from_pretrained(m.cfg, path, dtype=dtype, device=DEVICE, lm_head=m.lm_head)


def print_table(rows):
    if not rows:
        return
    keys = list(rows[0])
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(fmt(r[k]) for k in keys) + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qwen.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["engine", "spec", "compile"])
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                    help="also (engine) or only (spec) measure the compiled engine (qwen.compiled)")
    ap.add_argument("--freeze", action=argparse.BooleanOptionalAction, default=None,
                    help="with --compile: bake the weights into each graph, or (--no-freeze) stream them (default: qwen.compiled.host.choose_strategy)")
    ap.add_argument("--ahead", action="store_true",
                    help="with --compile: build the graphs ahead of time (torch.export + AOTInductor), as on ZeroGPU")
    ap.add_argument("--shape", default=None, choices=["0.8b"], help="compile mode: random weights of this shape")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16"])
    ap.add_argument("--scripted", action="store_true")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=120)
    ap.add_argument("--rates", default="0.5,0.7,0.9")
    ap.add_argument("--repeats", type=int, default=1,
                    help="spec --scripted: time plain and every speculative run this many times, alternating, "
                         "and report medians (this project's hosts vary by 20%% from run to run)")
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--model", default=None)
    ap.add_argument("--draft-vocab", action=argparse.BooleanOptionalAction, default=True,
                    help="spec: drafts score only the tokens of the draft vocabulary the loader applies (FR-Spec: "
                         "a checkpoint's draft_vocab.json, else the one shipped for its tokenizer, qwen.vocabs); "
                         "with --hand-set, the first 32768 tokens; --no-draft-vocab scores every token")
    ap.add_argument("--hand-set", action="store_true",
                    help="spec --scripted: the earlier hand-set configuration (random weights made here, random "
                         "prompt ids, the first 32768 ids as draft vocabulary), not the app's path")
    ap.add_argument("--prompt-tokens", type=int, default=64,
                    help="spec --scripted: the prompt's length, the first tokens of each real text")
    ap.add_argument("--prompts", default=None, help="a text file of prompts separated by blank lines")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--temperature", type=float, default=0.0, help="spec with a checkpoint: sample (default greedy)")
    ap.add_argument("--seed", type=int, default=0, help="with --temperature: the shared noise's seed")
    ap.add_argument("--rejection", action="store_true", help="with --temperature: the textbook rejection rule")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"host: CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads, "
          f"device {DEVICE}, torch {torch.__version__}")
    if args.mode == "compile":
        result = bench_compile(args)
        print_table(result["rows"])
    elif args.mode == "engine":
        args.dtype = args.dtype or "float32"
        result = bench_engine(args)
        print_table([result])
    elif args.scripted:
        result = bench_scripted(args)
        plain = ", ".join(f"{name} {rate:.2f}" for name, rate in result["plain_tok_s"].items())
        print(f"plain: {plain} tok/s{f' (medians of {args.repeats})' if args.repeats > 1 else ''} ({result['dtype']}, {result['compile_status']}"
              + (f", {result['strategy']}: {result['strategy_why']}; eager plain "
                 f"{result['eager_plain_tok_s']:.2f} tok/s; compiling {result['compile_s']:.0f} s" if args.compile else "")
              + f"); peak memory {result['peak_memory_gb']:.1f} GB; resident "
              + ", ".join(f"{k.replace('_', ' ')} {v:.1f} GB" for k, v in result["resident_gb"].items() if v))
        if result.get("compiled_speedups"):
            print("compiled passes, eager ÷ compiled: " +
                  ", ".join(f"{name} {x:.2f}x" for name, x in result["compiled_speedups"].items()))
        print_table(result["runs"])
        print("each lane's terms, ms (qwen.costs: a plain token = step + plain_around; a round = draft + snapshot + "
              "verify + restore + catch_up, or whole, + round_around + per_token per token):")
        print_table(result["terms_ms"])
        print_table([result["costs"]])
    else:
        args.dtype = args.dtype or "float32"
        result = bench_model(args)
        print(f"sampling: {result['sampling']}")
        if args.compile:
            print(f"compiled: {result['compile_status']} after {result['compile_s']:.0f} s of compiling")
        print_table(result["rows"])
        print_table([{"setting": k, **v} for k, v in result["summary"].items()])
        print_table([result["costs"]])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
