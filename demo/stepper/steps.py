"""The step-through view's logic: a recorded speculative run, walked one phase of one round at a time.

A run is recorded once, by the real engine with a qwen.trace.Trace (`record_run`), and then stepped
through with no further compute: going back is reading an earlier record. A position is one integer:

    step 0          prefill  — the prompt is run, the main model picks the first token, the head guesses
    step 3r - 2     round r, "guess"   — the head's draft token(s), with probabilities and alternatives
    step 3r - 1     round r, "verify"  — the main model at every position of [tok, d1..dk], ✓ / ✗
    step 3r         round r, "accept"  — what is emitted; KV truncated, DeltaNet memory restored/selected

    run = recording.record_run(model, mtp, chat, ids, Settings(prompt="Hi", k=2))
    step = next_step(run, 0)             # -> 1
    where(run, step)                     # -> (1, "guess")
    layer_status(run.records[1], "verify")   # -> ["steps_kept", ..., "written", ..., "untouched"]
                                             #    (one per layer of the stack, then the MTP head)

Recording a run (and the skip-the-restore proof) lives in recording.py; nothing here runs a model or
draws: figures.py and panels.py turn a run and a step into pictures and HTML.
"""
from dataclasses import dataclass, field

PHASES = ("guess", "verify", "accept")
MAX_ROUNDS = 300            # per-session bound on kept records (max_new_tokens is at most 256 anyway)
MAX_NEW_TOKENS = 256


def deltanet_layers(cfg):
    """The model's layer numbers (0-based, as the layer map's L0, L1, ...) of its DeltaNet layers."""
    return [i for i, kind in enumerate(cfg.layer_types) if kind == "linear_attention"]


def nearest_deltanet(layer, deltanet):
    """Where, in `deltanet` (deltanet_layers), the DeltaNet layer nearest to model layer `layer` is: the
    layer itself when it is one; for an attention layer (it has no memory) the closer neighbour, the lower
    one on a tie. 0 for a model without DeltaNet layers."""
    if not deltanet:
        return 0
    return min(range(len(deltanet)), key=lambda i: (abs(deltanet[i] - layer), deltanet[i]))


def token_text(run, token, chars=None):
    """How a token is shown alone: its label (qwen's text, or its bytes), newline and tab drawn as ↵ and ⇥,
    cut to `chars` with an ellipsis."""
    text = run.labels.get(token, f"#{token}").replace("\n", "↵").replace("\t", "⇥")
    return text if chars is None or len(text) <= chars else text[:chars - 1] + "…"


@dataclass
class Settings:
    prompt: str
    k: int = 1
    rollback: str = "select"          # "select" | "recompute" ("none" only in the proof)
    max_new_tokens: int = 48
    temperature: float = 0.0
    seed: int = 0
    watch_layer: int = -1             # model layer number, as the layer map's L0, L1, ... (an attention layer: its
                                      # nearest DeltaNet layer); -1: the one whose memory figure is clearest
    watch_head: int = -1              # value head; -1: the one whose memory figure is clearest
    raw: bool = False                 # True: the prompt as raw text, no chat template
    tree: str = ""                    # a draft tree's shape (demo.choices.TREES): the tree mode; "": a chain of k
    auto: bool = False                # k="auto": each round drafts 0..k tokens, as far as it pays (qwen.adaptive)
    # what a race's settings (demo.validate.RaceSettings) carry besides, fixed for the stepper (class attributes,
    # not fields: a trace file does not keep them): it samples with shared noise and never asks a model to think
    rule = "shared"
    thinking = False


def draft_summary(mtp, vocab_size, ids):
    """What a head's draft scores, for the page: {"scored": tokens it scores, "vocab": the vocabulary's size,
    "source": where that list came from, "coverage": the share of `ids` (this run's prompt and output) among them,
    "outside": the ids of `ids` it cannot guess, sorted}; None where it scores every token."""
    vocab = getattr(mtp, "draft_vocab", None)
    if vocab is None or not ids:
        return None
    kept = set(vocab.tolist())
    return {"scored": len(kept), "vocab": vocab_size, "source": mtp.draft_source or "",
            "coverage": sum(i in kept for i in ids) / len(ids), "outside": sorted(set(ids) - kept)}


@dataclass
class Run:
    """One recorded run: everything the view needs, as plain data (so it can be exported as JSON)."""
    settings: Settings
    model_name: str
    prompt_ids: list                  # [T] ids of the whole prompt (chat markup included)
    output_ids: list                  # every new id, a final stop token included
    pieces: list                      # per output id: the text it completed (whole characters only)
    labels: dict                      # id -> a short label for one token shown alone
    records: list                     # qwen.trace records; records[0] is the prefill
    stop_ids: list = field(default_factory=list)
    plain_step_seconds: float = None  # one plain decoding step, timed when the run was recorded
    costs: dict = None                # the race's measurement of this host (qwen.costs.Costs.as_dict()), taken
                                      # right after the recording: what the what-if predicts from
    ended: str = ""                   # "stop" | "length" | "time" | "rounds"
    draft: dict = None                # what the head's guesses are scored over (draft_summary), None: every token
    replay: bool = False              # loaded from a file: no model behind it


# --- walking the steps -------------------------------------------------------------------------------

def n_steps(run):
    return 1 + 3 * (len(run.records) - 1)


def where(run, step):
    """step -> (record index, phase); step 0 is the prefill."""
    step = clamp_step(run, step)
    if step == 0:
        return 0, "prefill"
    return (step - 1) // 3 + 1, PHASES[(step - 1) % 3]


def clamp_step(run, step):
    return max(0, min(int(step), n_steps(run) - 1))


def at_end(run, step):
    return step >= n_steps(run) - 1


def next_step(run, step):
    """One phase on; at the end it stays where it is (the view then says "done")."""
    return clamp_step(run, step + 1)


def prev_step(run, step):
    return clamp_step(run, step - 1)


def step_of(round_index, phase):
    return 0 if phase == "prefill" else 3 * (round_index - 1) + 1 + PHASES.index(phase)


def emitted_count(run, step):
    """How many output tokens are on screen at `step` (a round's tokens appear at its accept phase)."""
    r, phase = where(run, step)
    shown = r + 1 if phase in ("prefill", "accept") else r
    return sum(len(rec["emitted"]) for rec in run.records[:shown])


def origins(run):
    """Per output id: main | draft | correction | bonus, and the round that emitted it."""
    return [(e["origin"], rec["round"]) for rec in run.records for e in rec["emitted"]]


def token_at(run, pos, record=None, which="after"):
    """The id at sequence position `pos` as the given state saw it (drafts for after_verify), or None."""
    if record is not None and record.get("kind") == "round" and which != "before":
        P, k = record["pos"], record["k"]
        dirty = which == "after_verify" or (record["rollback"] == "none" and record["rolled_back"])
        if dirty and P < pos <= P + k:
            return record["draft"][pos - P - 1]["token"]
    seq = run.prompt_ids + run.output_ids
    return seq[pos] if 0 <= pos < len(seq) else None


def conv_positions(record, which, kernel_columns):
    """Positions whose inputs the conv window holds in a state (oldest first): the last K-1 tokens run."""
    state = record["states"][which]
    end = state["pos"]
    if record.get("kind") == "round" and which == "after" and record["rollback"] == "none" \
            and record["rolled_back"]:
        end = record["pos"] + record["k"] + 1          # the window was left as verify wrote it
    return list(range(end - kernel_columns, end))


def acceptance(records):
    """Per-draft acceptance a, estimated as accepted / (accepted + rejections): each round is a run of
    successes ending in one failure unless all k were accepted. -> (a, accepted, rounds)"""
    rounds = [r for r in records if r.get("kind") == "round"]
    hits = sum(r["accepted"] for r in rounds)
    misses = sum(1 for r in rounds if r["accepted"] < r["k"])
    return (hits / (hits + misses) if hits + misses else 0.0), hits, len(rounds)


# --- what each kind of state does in each phase --------------------------------------------------------

STATUSES = ("untouched", "written", "snapshot_written", "steps_kept", "truncated", "restored", "selected",
            "kept", "dirty")


def layer_status(record, phase):
    """One status per layer of the main stack, then one for the MTP head's cache (see STATUSES)."""
    layers = (record["states"].get("after") or record["states"]["before"])["layers"]
    kinds = [layer["kind"] for layer in layers]
    if record.get("kind") == "prefill" or phase == "prefill":
        return ["written"] * (len(kinds) + 1)
    rollback, rejected = record["rollback"], record["rolled_back"]
    if phase == "guess":
        # d1 was guessed at the end of the last round; d2..dk extend the head's cache
        return ["untouched"] * len(kinds) + ["written" if record["k"] > 1 else "untouched"]
    if phase == "verify":
        recurrent = {"recompute": "snapshot_written", "select": "steps_kept"}.get(rollback, "written")
        return [recurrent if kind == "deltanet" else "written" for kind in kinds] + ["untouched"]
    if rejected:
        recurrent = {"recompute": "restored", "select": "selected"}.get(rollback, "dirty")
        main = [recurrent if kind == "deltanet" else "truncated" for kind in kinds]
    else:
        main = ["selected" if kind == "deltanet" and rollback == "select" else "kept" for kind in kinds]
    # the head drops its speculative entries (truncated to P) and learns the accepted positions
    return main + ["truncated" if record["k"] > 1 else "written"]


def state_for_phase(phase):
    """Which recorded state a phase shows: the state as it stands at the end of that phase."""
    return {"prefill": "after", "guess": "before", "verify": "after_verify", "accept": "after"}[phase]


def watched(run):
    """(model layer number, value head) whose memory the run's views show (the one chosen after the run
    where its settings said -1), or (0, 0) for a model without DeltaNet layers."""
    watch = run.records[0]["states"]["after"].get("watch")
    return (watch["layer"], watch["head"]) if watch else (0, 0)


def head_bytes(state):
    """Bytes of the MTP head's KV cache: it is one attention layer of the same shape as the main ones,
    so it holds as many bytes per position as any attention layer of the stack."""
    attention = [(layer["bytes"], n) for layer, n in
                 zip([la for la in state["layers"] if la["kind"] == "attention"], state["kv"]) if n]
    if not attention:
        return 0
    per_position = attention[0][0] / attention[0][1]
    return int(per_position * state["head_kv"])
