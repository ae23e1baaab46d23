"""Record and replay: a run's trace as a JSON file, and a strict reader for files visitors upload.

    path = write_trace(run, folder)          # {"format": "qwen-mtp-trace", "version": 1, ...}
    run = read_trace(path)                   # a stepper.Run with replay=True; TraceError if rejected

An uploaded file is untrusted. It is read as JSON only (never pickle, never eval), at most MAX_BYTES,
and checked field by field before anything uses it: types (a bool is not an int), finite numbers,
bounded lengths and nesting, token ids as non-negative ints, and the emitted tokens must add up to the
output. A rejection says which field is wrong, e.g. "records[3].verify[1].prob: expected a number".
A tree run (settings.tree, the stepper's tree mode) holds "tree_round" records: a round's record with the tree's
notes (demo.stepper.treerec), whose shape-derived fields (parents, depths, mask, windows) must be the run's tree's
and whose path must be a walk of the tree.
"""
import json
import math
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict

from demo.stepper.steps import MAX_NEW_TOKENS, MAX_ROUNDS, Run, Settings
from demo.choices import ENGINE_ROLLBACKS, ORIGINS, TREES
from qwen.tree import parse_tree

FORMAT, VERSION = "qwen-mtp-trace", 1
MAX_BYTES = 8 * 1024 * 1024        # a 256-round run with k = 1 exports to about 4 MB
MAX_DEPTH = 12                     # the format itself nests 7 deep
MAX_PROMPT_IDS = 32768
MAX_OUTPUT = 1024
MAX_GRID = 64                      # memory and conv grids are at most 24 x 24 in qwen.trace
MAX_LAYERS = 512
MAX_TOP = 32
MAX_K = 8
SECONDS = ("prefill", "draft", "verify", "snapshot", "restore", "rerun", "catch_up", "fused")


class TraceError(ValueError):
    """An uploaded trace was rejected; the message says why, for people."""


# --- export -----------------------------------------------------------------------------------------------

def to_dict(run):
    return {"format": FORMAT, "version": VERSION, "model": run.model_name, "prompt": run.settings.prompt,
            "settings": asdict(run.settings), "prompt_ids": run.prompt_ids, "output_ids": run.output_ids,
            "pieces": run.pieces, "output_text": "".join(run.pieces),
            "labels": {str(i): text for i, text in sorted(run.labels.items())}, "stop_ids": run.stop_ids,
            "plain_step_seconds": run.plain_step_seconds, "costs": run.costs, "ended": run.ended,
            "draft": run.draft, "records": run.records}


def dumps(run):
    return json.dumps(to_dict(run), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


EXPORT_DIR = os.path.join(tempfile.gettempdir(), "qwen-mtp-traces")
EXPORT_KEEP_SECONDS = 600          # Gradio copies an exported file into its own cache at once; ours can go


def prune_exports(folder=EXPORT_DIR, keep_seconds=EXPORT_KEEP_SECONDS, now=None):
    """Delete exported traces older than `keep_seconds` (each export would otherwise stay on disk). Each
    export has a folder of its own, so two visitors exporting in the same second never share a file."""
    now = now or time.time()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        try:
            if name.startswith("export-") and now - os.path.getmtime(path) > keep_seconds:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def write_trace(run, folder=None):
    """Write the run as JSON into `folder` (default: a fresh file in EXPORT_DIR, whose files older than
    EXPORT_KEEP_SECONDS are deleted first). -> the file's path"""
    if folder is None:
        prune_exports()
        os.makedirs(EXPORT_DIR, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="export-", dir=EXPORT_DIR)
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", run.model_name or "model").strip("-")[:40] or "model"
    path = os.path.join(folder, f"mtp-trace-{model}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(run))
    return path


# --- import ------------------------------------------------------------------------------------------------

def read_trace(path):
    """A stepper.Run from an uploaded file. Raises TraceError with a message for people."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise TraceError("the file cannot be read") from e
    if size > MAX_BYTES:
        raise TraceError(f"the file is {size / 2**20:.1f} MB; the limit is {MAX_BYTES // 2**20} MB")
    with open(path, "rb") as f:
        return loads(f.read(MAX_BYTES + 1))


def loads(data):
    """bytes or str -> a stepper.Run, after checking everything (see the module docstring)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise TraceError(f"the file is over {MAX_BYTES // 2**20} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceError("not a UTF-8 text file (a trace is JSON)") from e
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_int=_int_literal)
    except RecursionError as e:
        raise TraceError("the JSON is nested too deeply") from e
    except (json.JSONDecodeError, ValueError) as e:
        raise TraceError(f"not valid JSON ({str(e)[:120]})") from e
    _depth(obj, 0)
    return from_dict(obj)


def _no_constant(name):
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


def _int_literal(s):
    if len(s.lstrip("-")) > 18:
        raise ValueError(f"integer {s[:20]}… is too long")
    return int(s)


def _depth(obj, level):
    if level > MAX_DEPTH:
        raise TraceError(f"the JSON is nested more than {MAX_DEPTH} levels deep")
    if isinstance(obj, dict):
        for v in obj.values():
            _depth(v, level + 1)
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)):
                _depth(v, level + 1)


def _fail(where, what):
    raise TraceError(f"{where}: {what}")


def _int(x, where, lo=0, hi=2**31 - 1):
    if isinstance(x, bool) or not isinstance(x, int):
        _fail(where, "expected an integer")
    if not lo <= x <= hi:
        _fail(where, f"{x} is outside {lo}..{hi}")
    return x


def _num(x, where, lo=-1e6, hi=1e6):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        _fail(where, "expected a number")
    if not math.isfinite(x) or not lo <= x <= hi:
        _fail(where, f"{x} is not a finite number in {lo:g}..{hi:g}")
    return float(x)


def _str(x, where, limit):
    if not isinstance(x, str):
        _fail(where, "expected a string")
    if len(x) > limit:
        _fail(where, f"longer than {limit} characters")
    return x


def _list(x, where, limit, lo=0):
    if not isinstance(x, list):
        _fail(where, "expected a list")
    if not lo <= len(x) <= limit:
        _fail(where, f"has {len(x)} items; expected {lo}..{limit}")
    return x


def _items(check, x, where, most, least=0, **bounds):
    """A list of `least`..`most` items, each checked by `check` (_int, _num, _grid, ...) with `bounds`. -> the
    checked items"""
    return [check(v, f"{where}[{i}]", **bounds) for i, v in enumerate(_list(x, where, most, least))]


def _dict(x, where, required=()):
    if not isinstance(x, dict):
        _fail(where, "expected an object")
    for key in required:
        if key not in x:
            _fail(where, f"missing '{key}'")
    return x


def _choice(x, where, options):
    if x not in options:
        _fail(where, f"expected one of {', '.join(options)}")
    return x


def _grid(x, where):
    rows = _list(x, where, MAX_GRID, lo=1)
    width = len(_list(rows[0], f"{where}[0]", MAX_GRID, lo=1))
    for i, row in enumerate(rows):
        if len(_list(row, f"{where}[{i}]", MAX_GRID, lo=1)) != width:
            _fail(f"{where}[{i}]", "rows differ in length")
        for j, v in enumerate(row):
            _num(v, f"{where}[{i}][{j}]")


def _token_entry(e, where, verify=False):
    _dict(e, where, ("token", "prob"))
    _int(e["token"], f"{where}.token")
    _num(e["prob"], f"{where}.prob", 0, 1)
    for i, pair in enumerate(_list(e.get("top", []), f"{where}.top", MAX_TOP)):
        _list(pair, f"{where}.top[{i}]", 2, lo=2)
        _int(pair[0], f"{where}.top[{i}][0]")
        _num(pair[1], f"{where}.top[{i}][1]", 0, 1)
    if verify and "draft_prob" in e:
        _num(e["draft_prob"], f"{where}.draft_prob", 0, 1)
    if verify and "match" in e and not isinstance(e["match"], bool):
        _fail(f"{where}.match", "expected true or false")


def _state(s, where):
    _dict(s, where, ("pos", "kv", "head_kv", "layers", "memory", "conv", "watch"))
    _int(s["pos"], f"{where}.pos")
    _items(_int, s["kv"], f"{where}.kv", MAX_LAYERS)
    _int(s["head_kv"], f"{where}.head_kv")
    layers = _list(s["layers"], f"{where}.layers", MAX_LAYERS, lo=1)
    for i, layer in enumerate(layers):
        _dict(layer, f"{where}.layers[{i}]", ("index", "kind", "bytes"))
        _int(layer["index"], f"{where}.layers[{i}].index", 0, MAX_LAYERS)
        _choice(layer["kind"], f"{where}.layers[{i}].kind", ("deltanet", "attention"))
        _int(layer["bytes"], f"{where}.layers[{i}].bytes", 0, 2**40)
    if sum(layer["kind"] == "attention" for layer in layers) != len(s["kv"]):
        _fail(f"{where}.kv", "needs one length per attention layer")
    _grid(s["memory"], f"{where}.memory")
    _grid(s["conv"], f"{where}.conv")
    _dict(s["watch"], f"{where}.watch", ("layer", "head"))
    _int(s["watch"]["layer"], f"{where}.watch.layer", 0, MAX_LAYERS)
    _int(s["watch"]["head"], f"{where}.watch.head", 0, 4096)
    if "change" in s:
        _items(_num, s["change"], f"{where}.change", MAX_LAYERS, lo=0)


def _seconds(x, where):
    for key, v in _dict(x, where).items():
        _choice(key, f"{where}", SECONDS)
        _num(v, f"{where}.{key}", 0, 1e5)


def _emitted(x, where, limit):
    for i, e in enumerate(_list(x, where, limit)):
        _dict(e, f"{where}[{i}]", ("token", "origin"))
        _int(e["token"], f"{where}[{i}].token")
        _choice(e["origin"], f"{where}[{i}].origin", ORIGINS)


def _tree_notes(r, where, tree):
    """A tree round's notes (demo.stepper.treerec): what follows from the tree's parents must, and the path must
    be the walk of the main model's picks through it."""
    _dict(r, where, ("parents", "depths", "tokens", "nodes", "mask", "windows", "kernel", "picks", "path",
                     "row_picks", "mixed", "memory", "next_token"))
    kernel = _int(r["kernel"], f"{where}.kernel", 2, 16)
    for name, want in (("parents", list(tree.parents)), ("depths", list(tree.depths)), ("k", tree.depth),
                       ("mask", [[int(x) for x in row] for row in tree.seen]),
                       ("windows", [list(row) for row in tree.conv_reads(kernel)])):
        if r[name] != want:
            _fail(f"{where}.{name}", "does not follow from the run's tree")
    n = tree.size
    for name in ("tokens", "picks", "row_picks"):
        _items(_int, r[name], f"{where}.{name}", n, n)
    for j, node in enumerate(_list(r["nodes"], f"{where}.nodes", n, lo=n)[1:], start=1):
        _dict(node, f"{where}.nodes[{j}]", ("prob", "rank"))
        _num(node["prob"], f"{where}.nodes[{j}].prob", 0, 1)
        _int(node["rank"], f"{where}.nodes[{j}].rank", 0, n)
    path = _items(_int, r["path"], f"{where}.path", n, 1, hi=n - 1)
    walked = [0]
    while len(walked) < len(path) and path[len(walked)] in tree.children[walked[-1]]:
        walked.append(path[len(walked)])
    if path != walked or any(r["tokens"][c] == r["picks"][path[-1]] for c in tree.children[path[-1]]):
        _fail(f"{where}.path", "is not the walk of the main model's picks through the tree")
    if r["accepted"] != len(path) - 1 or r["next_token"] != r["picks"][path[-1]]:
        _fail(f"{where}.accepted", "must be the path's drafts, then the main model's pick after it")
    if r["rolled_back"] is not bool(tree.children[path[-1]]):
        _fail(f"{where}.rolled_back", "must say whether the path stopped above a leaf")
    _items(_num, r["mixed"], f"{where}.mixed", n, n, lo=0)
    if r["memory"] is not None:
        memory = _dict(r["memory"], f"{where}.memory", ("layer", "head", "before", "tree", "row_order"))
        _int(memory["layer"], f"{where}.memory.layer", 0, MAX_LAYERS)
        _int(memory["head"], f"{where}.memory.head", 0, 4096)
        _grid(memory["before"], f"{where}.memory.before")
        for name in ("tree", "row_order"):
            _items(_grid, memory[name], f"{where}.memory.{name}", n, n)


def _decision(d, where):
    """A k="auto" round's choice (qwen.adaptive.decision): a rest, or per position three numbers, the drafted
    count, and a round's cost by length in plain steps. -> the number of tokens drafted"""
    _dict(d, where, ("kept", "steps"))
    _items(_num, d["steps"], f"{where}.steps", MAX_K + 1, 1, lo=0, hi=1e4)
    if d.get("rested", False) is not False:
        if d["rested"] is not True or d["kept"] != 0:
            _fail(f"{where}.rested", "a rest is true and keeps no guess")
        return 0
    _dict(d, where, ("chance", "reach", "pays_above"))
    n = len(_items(_num, d["chance"], f"{where}.chance", MAX_K, 1, lo=0, hi=1))
    for key, lo in (("reach", 0), ("pays_above", -1e4)):
        _items(_num, d[key], f"{where}.{key}", n, n, lo=lo, hi=1 if lo == 0 else 1e4)
    if not isinstance(d.get("probe", False), bool):
        _fail(f"{where}.probe", "expected true or false")
    return _int(d["kept"], f"{where}.kept", 0, n)


def _record(r, i, tree=None, auto=False):
    """A round's record (qwen.trace's), a chain's or, given the run's tree, a tree round's (then also its notes);
    auto (k="auto"): a round may keep no draft (a plain step), and says how it chose (its decision)."""
    where = f"records[{i}]"
    _dict(r, where, ("round", "kind", "pos", "emitted", "seconds", "states"))
    if _int(r["round"], f"{where}.round", 0, MAX_ROUNDS + 1) != i:
        _fail(f"{where}.round", f"expected {i} (records go in order)")
    _int(r["pos"], f"{where}.pos")
    _seconds(r["seconds"], f"{where}.seconds")
    if "race_seconds" in r:                          # the round as the race runs it (recording.as_raced)
        _seconds(r["race_seconds"], f"{where}.race_seconds")
    if i == 0:
        _choice(r["kind"], f"{where}.kind", ("prefill",))
        _emitted(r["emitted"], f"{where}.emitted", 1)
        if "next_draft" in r:
            _token_entry(r["next_draft"], f"{where}.next_draft")
        _state(_dict(r["states"], f"{where}.states", ("after",))["after"], f"{where}.states.after")
        return
    _choice(r["kind"], f"{where}.kind", ("tree_round",) if tree else ("round",))
    _dict(r, where, ("k", "draft", "verify", "accepted", "rollback", "rolled_back", "snapshot_bytes"))
    k = _int(r["k"], f"{where}.k", 0 if auto else 1, MAX_K)
    if auto and _decision(_dict(r, where, ("decision",))["decision"], f"{where}.decision") != k:
        _fail(f"{where}.decision.kept", "must be the round's k")
    rows = tree.size if tree else k + 1
    _items(_token_entry, r["draft"], f"{where}.draft", rows - 1, rows - 1)
    _items(_token_entry, r["verify"], f"{where}.verify", rows, rows, verify=True)
    n = _int(r["accepted"], f"{where}.accepted", 0, k)
    _emitted(r["emitted"], f"{where}.emitted", n + 1)
    _choice(r["rollback"], f"{where}.rollback", ENGINE_ROLLBACKS)
    if tree:
        _tree_notes(r, where, tree)
    elif r["rolled_back"] is not (n < k):
        _fail(f"{where}.rolled_back", "must say whether fewer than k guesses were accepted")
    _int(r["snapshot_bytes"], f"{where}.snapshot_bytes", 0, 2**40)
    states = _dict(r["states"], f"{where}.states", ("before", "after_verify", "after"))
    for name in ("before", "after_verify", "after"):
        _state(states[name], f"{where}.states.{name}")


COSTS = ("step", "draft", "verify", "snapshot", "back", "keep", "catch_up", "whole", "plain_around", "round_around",
         "per_token", "prefill", "prefill_spec")   # qwen.costs.Costs' seconds; older files lack catch_up and the last five


def _costs(x, settings):
    """The race's measurement of the recording host (qwen.costs.Costs as a dict), or None when absent."""
    if x is None:
        return None
    _dict(x, "costs", ("k", "rollback", "step", "draft", "verify"))
    out = {"k": _int(x["k"], "costs.k", 1, MAX_K), "rollback": _choice(x["rollback"], "costs.rollback",
                                                                           ENGINE_ROLLBACKS)}
    for key in COSTS:
        out[key] = _num(x.get(key, 0.0), f"costs.{key}", 0, 1e4)
    if out["k"] != settings.k or out["rollback"] != settings.rollback:
        _fail("costs", "measured for another k or rollback than the run's")
    return out


def from_dict(obj):
    """A checked dict (the exported shape) -> stepper.Run with replay=True. Raises TraceError."""
    _dict(obj, "file", ("format", "version", "settings", "prompt_ids", "output_ids", "pieces", "labels",
                        "records"))
    if obj["format"] != FORMAT:
        _fail("format", f"expected \"{FORMAT}\" (is this a trace exported by this page?)")
    if obj["version"] != VERSION:
        _fail("version", f"this page reads version {VERSION}")
    st = _dict(obj["settings"], "settings", ("prompt", "k", "rollback", "max_new_tokens"))
    settings = Settings(
        prompt=_str(st["prompt"], "settings.prompt", 100_000), k=_int(st["k"], "settings.k", 1, MAX_K),
        rollback=_choice(st["rollback"], "settings.rollback", ENGINE_ROLLBACKS),
        max_new_tokens=_int(st["max_new_tokens"], "settings.max_new_tokens", 1, MAX_NEW_TOKENS),
        temperature=_num(st.get("temperature", 0.0), "settings.temperature", 0, 10),
        seed=_int(st.get("seed", 0), "settings.seed"),
        watch_layer=_int(st.get("watch_layer", 0), "settings.watch_layer", -1, MAX_LAYERS),
        watch_head=_int(st.get("watch_head", 0), "settings.watch_head", -1, 4096), raw=st.get("raw", False),
        tree=_choice(st.get("tree", ""), "settings.tree", TREES), auto=st.get("auto", False))
    if not isinstance(settings.auto, bool) or (settings.auto and settings.tree):
        _fail("settings.auto", "expected true or false, and false for a tree")
    if settings.tree and settings.k != parse_tree(settings.tree).depth:
        _fail("settings.k", "must be the tree's depth")
    if not isinstance(settings.raw, bool):
        _fail("settings.raw", "expected true or false")
    prompt_ids = _items(_int, obj["prompt_ids"], "prompt_ids", MAX_PROMPT_IDS, 1)
    output_ids = _items(_int, obj["output_ids"], "output_ids", MAX_OUTPUT, 1)
    pieces = _items(_str, obj["pieces"], "pieces", MAX_OUTPUT, limit=1000)
    if len(pieces) != len(output_ids):
        _fail("pieces", "needs one text per output token")
    labels = {}
    for key, text in _dict(obj["labels"], "labels").items():
        if not re.fullmatch(r"\d{1,10}", key):
            _fail("labels", f"key {key[:20]!r} is not a token id")
        labels[int(key)] = _str(text, f"labels[{key}]", 200)
    if len(labels) > 64 * (MAX_ROUNDS + 1) + MAX_PROMPT_IDS:
        _fail("labels", "too many entries")
    records = _list(obj["records"], "records", MAX_ROUNDS + 1, lo=1)
    for i, r in enumerate(records):
        _record(r, i, parse_tree(settings.tree) if settings.tree else None, settings.auto)
    emitted = [e["token"] for r in records for e in r["emitted"]]
    if emitted != output_ids:
        _fail("output_ids", "do not match the tokens the records emitted")
    stop_ids = _items(_int, obj.get("stop_ids", []), "stop_ids", 64)
    plain = obj.get("plain_step_seconds")
    plain = None if plain is None else _num(plain, "plain_step_seconds", 0, 1e4)
    costs = None if settings.tree else _costs(obj.get("costs"), settings)
    ended = _choice(obj.get("ended", "length"), "ended", ("stop", "length", "time", "rounds", ""))
    model = _str(obj.get("model", ""), "model", 200)
    return Run(settings=settings, model_name=model, prompt_ids=prompt_ids, output_ids=output_ids, pieces=pieces,
               labels=labels, records=records, stop_ids=stop_ids, plain_step_seconds=plain, costs=costs, ended=ended,
               draft=_draft(obj.get("draft")), replay=True)


def _draft(x):
    """The run's draft summary (stepper.draft_summary), or None (every token scored, or an older trace)."""
    if x is None:
        return None
    d = _dict(x, "draft", ("scored", "vocab", "source", "coverage", "outside"))
    vocab = _int(d["vocab"], "draft.vocab", 1, 10_000_000)
    return {"scored": _int(d["scored"], "draft.scored", 1, vocab), "vocab": vocab,
            "source": _str(d["source"], "draft.source", 200), "coverage": _num(d["coverage"], "draft.coverage", 0, 1),
            "outside": _items(_int, d["outside"], "draft.outside", MAX_PROMPT_IDS + MAX_OUTPUT)}
