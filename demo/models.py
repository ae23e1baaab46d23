"""Which models the page offers, loading each (weights + MTP head + tokenizer) once per process, and
the process's torch threads (configure_threads).

The page offers three kinds of model, by key (the model dropdown's value):

    "Embedded demo checkpoint"      assets/ (tiny, loads instantly; the default unless the next is cached)
    "Qwen/Qwen3.5-0.8B", -2B, -4B   downloaded from the Hugging Face hub on first use, then cached
    "local: <folder name>"          folders named on the command line (`python app.py --model-dir PATH`,
                                    repeatable) or in $QWEN_MODEL_DIRS (os.pathsep-separated); $QWEN_MODEL
                                    names the default model (a folder or a hub id); demo.environment reads them

The web page only ever sends a key; a key maps to a folder the server's owner allowed, so a visitor
cannot make the server read an arbitrary path.

    store = ModelStore.from_environment(parse_args(sys.argv[1:]).model_dirs)
    loaded = store.get("Embedded demo checkpoint")     # Loaded(key, path, model, mtp, chat, dtype, seconds)

Loaded models are shared read-only by every visitor (generation keeps its state outside the model);
a lock makes sure each loads once. Decoding takes `loaded.engine()`: the eager modules, until the
compiled views (qwen.compiled) are ready and swapped in, in one assignment. A failed load raises ModelError with a message for people that
names the weight file: unreadable or truncated safetensors, a shard the index lists but the folder
lacks, a tensor of the wrong shape (a broken draft head included: only a checkpoint with no mtp.*
tensors at all loads without one), NaN or infinite weights, a hub that cannot be reached.
"""
import argparse
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field

import torch

from demo import environment, gpu
from demo.environment import compile_wanted
from qwen.chat import Chat
from qwen.compiled import Phase, Status, Why, compile_head, compile_model, default_dtype, warm_up
from qwen.compiled.host import HostPlan, Strategy, choose_strategy, host_plan, variants_for
from qwen.config import read_config
from qwen.model import Model
from qwen.mtp import MTP
from qwen.weights import EMBEDDED, ModelNotFound, find_model, list_tensors, weight_files

log = logging.getLogger(__name__)

EMBEDDED_KEY = "Embedded demo checkpoint"
HUB_MODELS = ("Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-2B", "Qwen/Qwen3.5-4B")
PRELOADED = "Qwen/Qwen3.5-0.8B"      # the Space preloads it into its hub cache (README.md, preload_from_hub)
BIG_CHECKPOINT_BYTES = 3e9      # above this on disk, load in bfloat16 (a 4B model in float32 is 16 GB)


class ModelError(RuntimeError):
    """A model could not be offered or loaded; the message is meant for the person who chose it."""


@dataclass
class Loaded:
    key: str
    path: str
    model: Model
    mtp: MTP | None             # None: the checkpoint has no draft head (the race needs one)
    chat: Chat
    dtype: torch.dtype
    seconds: float              # time it took to load
    plan: HostPlan = None       # how this host runs it (device, dtype, strategy, threads, why), decided at load
    views: tuple = field(default=None, repr=False)     # (model, head) compiled views while they compile, and after
    serving: tuple = field(default=None, repr=False)   # the views, once their first passes are ready

    @property
    def context(self):
        return self.model.cfg.max_position_embeddings

    def engine(self):
        """-> (model, head) to decode with: the compiled views once they serve, else the eager modules."""
        return self.serving or (self.model, self.mtp)

    def compile_status(self):
        """A Status: COMPILING, COMPILED, COMPILING_MORE (plain and greedy speculative decoding run
        compiled; the stepper's and sampling's passes still compile), EAGER and why (NOT_ASKED when
        compiling was not asked for)."""
        if self.views is None:
            return Status(Phase.EAGER, Why.NOT_ASKED)
        model, head = self.views
        status = model.steps.status
        parts = [model.steps] + ([head.steps, head.rounds, head.sampled_rounds] if head is not None else [])
        if status.phase is Phase.COMPILED and any(p is not None and p.warming_thread is not None for p in parts):
            return Status(Phase.COMPILING_MORE)
        return status


def parse_args(argv):
    """The app's command line: `--model-dir PATH` (repeatable) adds local model folders."""
    parser = argparse.ArgumentParser(description="Qwen3.5 speculative decoding demo")
    parser.add_argument("--model-dir", dest="model_dirs", action="append", default=[],
                        help="a local model folder (hub layout) to offer in the model menu; repeatable")
    return parser.parse_known_args(argv)[0]


def model_folders(path):
    """`path` itself when it is a model folder, else its sub-folders that are (one level down)."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(os.path.join(path, "config.json")):
        return [path]
    if not os.path.isdir(path):
        return []
    subs = (os.path.join(path, name) for name in sorted(os.listdir(path)))
    return [p for p in subs if os.path.isfile(os.path.join(p, "config.json"))]


class ModelStore:
    """The offered models (key -> folder or hub id) and the ones loaded so far (key -> Loaded)."""

    def __init__(self, local_dirs=(), default=None, keep=2):
        self.sources = {EMBEDDED_KEY: EMBEDDED}
        self.sources.update({m: m for m in HUB_MODELS})
        for folder in local_dirs:
            for path in model_folders(folder):
                if path in self.sources.values():
                    continue
                key, n = f"local: {os.path.basename(path)}", 2
                while key in self.sources:
                    key, n = f"local: {os.path.basename(path)} ({n})", n + 1
                self.sources[key] = path
            if not model_folders(folder):
                log.warning("%s: not a model folder (no config.json); not offered", folder)
        self.default = self._key_of(default) if default else EMBEDDED_KEY
        self.keep = keep                    # how many non-embedded models stay in memory at once
        self._loaded = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, model_dirs=(), environ=None):
        """Offered models from the command line's folders, $QWEN_MODEL_DIRS and $QWEN_MODEL; as many kept
        in memory as $QWEN_KEEP_MODELS says (demo.environment; `environ`: a mapping to read them from instead).
        Without $QWEN_MODEL the page opens with PRELOADED where the hub cache already holds it (no network
        asked), else with the embedded checkpoint."""
        dirs = list(model_dirs) + environment.model_dirs(environ)
        default = environment.default_model(environ)
        if default is None and cached_hub_folder(PRELOADED, environment.hub_cache(environ)):
            default = PRELOADED
        if default and (os.path.isdir(os.path.expanduser(default)) or default.startswith((".", "/", "~"))):
            dirs.append(default)
        store = cls(dirs, None, environment.keep_models(environ))
        if default:
            try:
                store.default = store._key_of(default)
            except ModelError as e:
                log.warning("QWEN_MODEL ignored: %s", e)
        return store

    def _key_of(self, name):
        """The key for a folder or hub id given by the server's owner, adding a hub id if new."""
        if name in self.sources:
            return name
        folders = model_folders(name)
        for key, src in self.sources.items():
            if folders and src == folders[0]:
                return key
        if not folders and name.count("/") == 1 and not name.startswith((".", "/", "~")):
            self.sources[name] = name                       # another hub id
            return name
        raise ModelError(f"{name}: not a model folder and not a hub id")

    @property
    def choices(self):
        return list(self.sources)

    def is_embedded(self, key):
        return self.sources.get(key) == EMBEDDED

    def source(self, key):
        """Folder or hub id behind a key; only keys the server offers are accepted."""
        if key not in self.sources:
            raise ModelError(f"{str(key)[:80]!r} is not one of the offered models: {', '.join(self.sources)}")
        return self.sources[key]

    def preload(self):
        """Load the default model now when it is on disk: a folder, or a hub model the local hub cache holds
        (others wait for their first use: no download at start-up). On ZeroGPU this is what lets every GPU
        call, a process forked from this one, find it loaded. A default that fails to load is reported and
        replaced by the embedded checkpoint."""
        source = self.sources[self.default]
        if not os.path.isdir(source) and not cached_hub_folder(source, environment.hub_cache()):
            return None
        try:
            return self.get(self.default)
        except ModelError as e:
            log.error("default model unusable, using the embedded checkpoint: %s", e)
            self.default = EMBEDDED_KEY
            return self.get(self.default)

    def peek(self, key):
        """The loaded model for `key`, or None when it is not in memory (never loads)."""
        return self._loaded.get(key)

    def get(self, key=None, progress=None):
        """The model for `key` (default: the store's default), loading it on first use.
        `progress(fraction, desc=...)`, e.g. a gr.Progress, hears about a download."""
        key = key or self.default
        source = self.source(key)
        if key in self._loaded:
            return self._loaded[key]
        with self._lock:                        # one load at a time; a second caller waits, then shares it
            if key not in self._loaded:
                loaded = load_model(key, source, progress)
                self._evict(keep=self.keep - 1)
                self._loaded[key] = loaded
            return self._loaded[key]

    def _evict(self, keep):
        """Forget the oldest non-embedded models beyond `keep` (running generations keep their own reference)."""
        big = [k for k in self._loaded if not self.is_embedded(k)]
        for key in big[:max(0, len(big) - keep)]:
            del self._loaded[key]

    def describe(self, key):
        """{"has_template", "supports_thinking"} from the tokenizer files alone (no weights), or None
        when the folder is not on disk yet (a hub model not downloaded)."""
        loaded = self.peek(key)
        if loaded:
            return {"has_template": loaded.chat.has_template, "supports_thinking": loaded.chat.supports_thinking}
        source = self.sources.get(key)
        if source is None:
            return None
        folder = source if os.path.isdir(source) else cached_hub_folder(source)
        try:
            chat = Chat(None, folder) if folder else None
        except Exception:                      # unreadable tokenizer: loading will say what is wrong
            return None
        return chat and {"has_template": chat.has_template, "supports_thinking": chat.supports_thinking}


def cached_hub_folder(repo_id, cache_dir=None):
    """The hub model's folder if the local hub cache (cache_dir, or huggingface_hub's) already holds it
    with its config and weights, else None (no network)."""
    try:
        from huggingface_hub import snapshot_download
        folder = snapshot_download(repo_id, local_files_only=True, cache_dir=cache_dir)
    except Exception:
        return None
    try:
        weight_files(folder)
    except Exception:                          # a snapshot without weights (an interrupted download)
        return None
    return folder if os.path.isfile(os.path.join(folder, "config.json")) else None


def checkpoint_dtype(path, environ=None, device="cpu"):
    """-> (dtype, reason). $QWEN_DTYPE ("float32" / "bfloat16") decides when set; else bfloat16 on a GPU,
    or where this CPU multiplies it natively and the model is not small (qwen.compiled.default_dtype), or
    for a checkpoint too big to hold in float32; float32 otherwise."""
    name = environment.dtype_name(environ)
    if name:
        return getattr(torch, name), "QWEN_DTYPE"
    dtype, reason = default_dtype(device, read_config(path).hidden_size)
    size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors"))
    if dtype == torch.float32 and size > BIG_CHECKPOINT_BYTES:
        return torch.bfloat16, f"checkpoint of {size / 1e9:.1f} GB: too big for float32 ({reason})"
    return dtype, reason


def start_compiling(loaded, ks=(2,), ahead=False):
    """Compile the model's and head's decoding steps in a background thread; the eager modules serve
    until the first compiled passes are ready, then loaded.engine() returns the compiled views (one
    assignment), and loaded.compile_status() says how it went. ahead (ZeroGPU): every pass built ahead of
    time inside spaces.GPU (demo.gpu.warm_up_ahead), the views serving once all are. -> the thread"""
    model = compile_model(loaded.model, ks, ahead=ahead)
    head = compile_head(loaded.mtp, ks, model=model, ahead=ahead) if loaded.mtp is not None else None
    model.steps.status = Status(Phase.COMPILING)
    loaded.views = model, head

    def serve(model, head):
        loaded.serving = model, head

    def work():
        if ahead:
            report = gpu.warm_up_ahead(model, head, ks)
            serve(model, head)
        else:
            report = warm_up(model, head, ks, on_ready=serve)
        log.info("%s: %s (%.0f s of compiling; eager / compiled: %s)", loaded.key, report["status"],
                 report["seconds"], ", ".join(f"{name} {x:.2f}x" for name, x in report["speedups"].items()))
    thread = threading.Thread(target=work, name=f"compile {loaded.key}", daemon=True)
    thread.start()
    return thread


def load_model(key, source, progress=None, compile=None):
    """Find (download if needed) and load one model; compile it in the background where `compile` (None:
    the QWEN_COMPILE setting) says so. -> Loaded; raises ModelError naming the problem."""
    t0 = time.perf_counter()
    if progress is not None and not os.path.isdir(source):
        progress(0, desc=f"Downloading {key} from the Hugging Face hub…")
    try:                                                    # a hub model already cached needs no network
        path = (not os.path.isdir(source) and cached_hub_folder(source, environment.hub_cache())) or find_model(source)
    except ModelNotFound as e:                              # its message names the folder or hub id
        raise ModelError(str(e) if key == source else f"{key}: {e}") from e
    if progress is not None:
        progress(0.95, desc=f"Loading {key}…")
    folder = os.path.basename(path.rstrip("/"))
    try:
        device = environment.device()
        dtype, reason = checkpoint_dtype(path, device=device)
        log.info("%s: %s on %s (%s)", key, str(dtype).replace("torch.", ""), device, reason)
        model = Model.from_pretrained(path, dtype=dtype, device=device)
        chat = Chat(model, path)
        has_head = any(name.startswith("mtp.") for name in list_tensors(path))
        mtp = MTP.from_pretrained(model.cfg, path, dtype=dtype, device=device,
                                  lm_head=model.lm_head) if has_head else None
        check_finite(path, model, mtp)
    except Exception as e:      # corrupt or mismatched files raise many kinds of error; all end here
        log.exception("loading %s failed", key)
        detail = str(e)[:300]
        if ".safetensors" not in detail:                    # name the weight file(s) when the error did not
            detail += f" [in {_files_named(path)}]"
        raise ModelError(f"{key}: the checkpoint in {folder} could not be "
                         f"loaded ({type(e).__name__}: {detail})") from e
    if mtp is None:
        log.warning("%s: the checkpoint has no mtp.* tensors (no draft head)", key)
    wanted = compile_wanted() if compile is None else compile
    ahead = environment.zero_gpu()                          # there compiling means building ahead of time
    plan = host_plan(model, f"{str(dtype).replace('torch.', '')}: {reason}", wanted, ahead=ahead,
                     eager_why="ZeroGPU has no torch.compile (QWEN_COMPILE=1: passes built ahead of time)"
                     if ahead else "QWEN_COMPILE=0")
    log.info("%s: %s (%s)", key, plan, plan.why)
    loaded = Loaded(key, path, model, mtp, chat, dtype, time.perf_counter() - t0, plan)
    if wanted:
        start_compiling(loaded, compiled_ks(model, ahead), ahead=ahead)
    return loaded


def compiled_ks(model, ahead=False):
    """The draft lengths whose passes the app compiles: k = 2 (the race's default) first, then 1 and 3, which
    k="auto" drafts (compiled after k = 2's serve), wherever every graph shares one copy of the weights (streamed CPU
    graphs: a small model's, and a wide model's bfloat16 checkpoint loaded in float32, the host plan on CPU).
    ZeroGPU's ahead-of-time packages, CUDA and frozen graphs keep to k = 2: each more length costs minutes and
    gigabytes there."""
    if ahead:
        return (2,)
    strategy, _ = choose_strategy([model], None, len(variants_for((2, 1, 3))[0]))
    return (2, 1, 3) if strategy is Strategy.STREAMED else (2,)


def check_finite(path, model, mtp=None, chunk=1 << 22):
    """Refuse weights holding NaN or infinity (a corrupted download or a broken conversion), naming the
    tensor and the file it came from. Reads every weight once, in chunks (no full-size temporary)."""
    for prefix, module in (("", model), ("mtp.", mtp)):
        if module is None:
            continue
        for name, p in module.named_parameters():
            flat = p.detach().reshape(-1)
            for i in range(0, flat.numel(), chunk):
                if not torch.isfinite(flat[i:i + chunk]).all():
                    raise ValueError(f"{_file_of(path, prefix + name)}: tensor {prefix + name} holds NaN or "
                                     f"infinite values")


def _files_named(path):
    try:
        names = [os.path.basename(f) for f in weight_files(path)]
    except Exception:
        return "model.safetensors (missing)"
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _file_of(path, name):
    """The weight file that holds `name` (a parameter name; the checkpoint may prefix it), for messages."""
    files = weight_files(path)
    index = os.path.join(path, "model.safetensors.index.json")
    if len(files) > 1 and os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        for key, file in weight_map.items():
            if key == name or key.endswith("." + name):
                return os.path.join(path, file)
    return files[0]


def configure_threads(environ=None):
    """torch.set_num_threads(): $CPU_CORES when it is set, else one thread fewer than the machine's cores
    (demo.environment.torch_threads). Changes the whole process: called when the app is served
    (demo.page.serve), never on import.

    subtle: the web server's own threads (queue, rendering every streamed update) need a core too. With
    torch on every core they compete with its worker threads, and the many small operations of a
    speculative round suffer most (docs/benchmarks.md, 2026-11-29, many visitors)."""
    torch.set_num_threads(environment.torch_threads(environ))
    return torch.get_num_threads()
