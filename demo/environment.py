"""Every environment variable the demo reads, read here and nowhere else (the engine, qwen/, has its own
reader: qwen/environment.py). Each is read when it is needed, never at import, so a test may set one and see it
take effect.

    environment.max_seconds()                       # from os.environ
    environment.max_seconds({"QWEN_MAX_SECONDS": "30"})     # from a given mapping (tests)

VARIABLES is the one list of them: name, default, meaning. A value that cannot be read (not a number,
out of range) counts as unset: the default applies.
"""
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


VARIABLES = (
    Variable("QWEN_MODEL", "Qwen/Qwen3.5-0.8B where the hub cache holds it (a Space preloads it), else the embedded "
                          "checkpoint", "the model the page opens with: a folder or a hub id"),
    Variable("HF_HUB_CACHE", "huggingface_hub's (~/.cache/huggingface/hub)", "the hub cache: hub models are looked up "
                                                                            "there before any download"),
    Variable("QWEN_MODEL_DIRS", "none", "more local model folders to offer (os.pathsep-separated); the page "
                                       "itself can never name a server path"),
    Variable("QWEN_KEEP_MODELS", "2", "hub and local models kept in memory at once (the embedded one always is)"),
    Variable("QWEN_DTYPE", "bfloat16 on a GPU or where the CPU multiplies it natively, if the model is not "
                          "small (hidden size >= 1024), else float32",
            "float32 or bfloat16 for every model loaded"),
    Variable("QWEN_COMPILE", "1 (0 on ZeroGPU)", "compile the decoding steps in the background after loading (0: stay "
                                                "eager)"),
    Variable("QWEN_DEVICE", "cuda where torch sees a GPU, else cpu", "where models run: cpu or cuda"),
    Variable("SPACES_ZERO_GPU", "set by Hugging Face on ZeroGPU hardware", "ZeroGPU: a GPU only inside spaces.GPU "
                                                                          "functions, and no torch.compile"),
    Variable("CPU_CORES", "the machine's cores less one", "torch threads (one core is left to the web server)"),
    Variable("QWEN_CONCURRENCY", "one per 8 of CPU_CORES, at least 1", "generations that may run at once"),
    Variable("QWEN_QUEUE_SIZE", "16", "visitors waiting in the queue; more are told to come back"),
    Variable("QWEN_MAX_SECONDS", "120", "cap of one generation, in seconds: a race lane's own time in "
            "the engine, a stepper recording's wall-clock time"),
    Variable("QWEN_RACE_REPEAT_SECONDS", "5", "engine seconds a race spends on unseen repeats of itself, while "
                                             "nobody waits (its speed-up is their median)"),
    Variable("QWEN_CALIBRATE_SECONDS", "1.5", "engine seconds spent measuring the cost terms, once per model and "
                                            "settings"),
    Variable("QWEN_MAX_PROMPT_TOKENS", "2048", "longest prompt fed to a model; a longer one is cut to its end"),
    Variable("QWEN_SESSION_TTL", "3600", "seconds a visitor's session may stay unused before its memory is freed"),
    Variable("QWEN_MAX_SESSIONS", "100", "sessions kept in memory at once (the least recently used goes)"),
    Variable("QWEN_MAX_REQUEST_MB", "16", "largest request body accepted, in MB (larger: HTTP 413)"),
    Variable("QWEN_COMPILE_CACHE", "~/.cache/qwen-mtp/inductor", "compiled artefacts (read by the engine, "
                                                                "qwen/compiled/)"),
    Variable("GRADIO_SERVER_PORT", "7860", "where the page listens (read by Gradio)"),
    Variable("GRADIO_SERVER_NAME", "127.0.0.1", "the address it listens on (read by Gradio)"),
)


def _get(name, environ=None):
    """The raw value of a setting ("" when unset)."""
    return (os.environ if environ is None else environ).get(name, "") or ""


def _number(name, default, cast=float, environ=None, least=None):
    """A positive number (at least `least`, when given), or the default when unset or unreadable."""
    try:
        value = cast(_get(name, environ).strip())
    except (TypeError, ValueError):
        return default
    if value != value or value <= 0:           # NaN, zero, negative
        return default
    return max(least, value) if least is not None else value


# --- models ------------------------------------------------------------------------------------------------

def default_model(environ=None):
    """$QWEN_MODEL: a folder or hub id, or None for the embedded checkpoint."""
    return _get("QWEN_MODEL", environ).strip() or None


def hub_cache(environ=None):
    """$HF_HUB_CACHE (huggingface_hub reads it too, once, at import), or None for huggingface_hub's default."""
    return _get("HF_HUB_CACHE", environ).strip() or None


def model_dirs(environ=None):
    """$QWEN_MODEL_DIRS as a list of folders."""
    return [d for d in _get("QWEN_MODEL_DIRS", environ).split(os.pathsep) if d.strip()]


def keep_models(environ=None):
    """$QWEN_KEEP_MODELS: how many hub / local models stay in memory at once (at least 1, default 2)."""
    return _number("QWEN_KEEP_MODELS", 2, int, environ)


def dtype_name(environ=None):
    """$QWEN_DTYPE: "float32", "bfloat16", or None (let the host decide)."""
    name = _get("QWEN_DTYPE", environ).strip().lower()
    return name if name in ("float32", "bfloat16") else None


def compile_wanted(environ=None):
    """$QWEN_COMPILE: compile the decoding steps in the background after loading; 0 = eager. Default: yes,
    except on ZeroGPU, which does not support torch.compile."""
    value = _get("QWEN_COMPILE", environ).strip().lower()
    if not value:
        return not zero_gpu(environ)
    return value not in ("0", "false", "no", "off")


def zero_gpu(environ=None):
    """Whether this is ZeroGPU hardware ($SPACES_ZERO_GPU, set by Hugging Face, as the `spaces` package reads it)."""
    return _get("SPACES_ZERO_GPU", environ).strip().lower() in ("1", "t", "true")


def device(environ=None):
    """$QWEN_DEVICE ("cpu" or "cuda"), else cuda where torch sees a GPU (on ZeroGPU it does, from start-up)."""
    name = _get("QWEN_DEVICE", environ).strip().lower()
    if name in ("cpu", "cuda"):
        return name
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


# --- compute ---------------------------------------------------------------------------------------------

def race_repeat_seconds(environ=None):
    """$QWEN_RACE_REPEAT_SECONDS: the engine time a race's unseen repeats may take (default 5)."""
    return _number("QWEN_RACE_REPEAT_SECONDS", 5.0, float, environ)


def calibrate_seconds(environ=None):
    """$QWEN_CALIBRATE_SECONDS: the engine time measuring the cost terms may take (default 1.5)."""
    return _number("QWEN_CALIBRATE_SECONDS", 1.5, float, environ)


def cpu_cores(environ=None):
    """$CPU_CORES as a positive int, or None when unset or unreadable."""
    return _number("CPU_CORES", None, int, environ)


def torch_threads(environ=None, machine_cores=None):
    """Torch threads: $CPU_CORES, else one fewer than the machine's cores (`machine_cores`, default
    os.cpu_count()), at least 1: the web server's own threads need a core too (demo.models.configure_threads)."""
    return cpu_cores(environ) or max(1, (machine_cores or os.cpu_count() or 1) - 1)


def concurrency(environ=None):
    """How many generations may run at once: $QWEN_CONCURRENCY, else one per 8 of $CPU_CORES, else 1.
    Batch-1 decoding uses every core it is given, so more at once only splits them."""
    return _number("QWEN_CONCURRENCY", None, int, environ) or max(1, (cpu_cores(environ) or 1) // 8)


def queue_size(environ=None):
    """Most visitors waiting in the queue ($QWEN_QUEUE_SIZE, default 16); more are told to come back."""
    return _number("QWEN_QUEUE_SIZE", 16, int, environ)


def max_seconds(environ=None):
    """Cap of one generation in seconds ($QWEN_MAX_SECONDS, default 120): a race lane's own engine
    time, a stepper recording's wall-clock time."""
    return float(_number("QWEN_MAX_SECONDS", 120.0, float, environ))


def max_prompt_tokens(environ=None):
    """Longest prompt the page feeds a model ($QWEN_MAX_PROMPT_TOKENS, default 2048, at least 16): a
    longer one is cut to its end. Prefill memory grows with its square, so this keeps a big pasted text
    from exhausting memory even when the model's context is far longer."""
    return _number("QWEN_MAX_PROMPT_TOKENS", 2048, int, environ, least=16)


# --- serving ---------------------------------------------------------------------------------------------

def session_ttl(environ=None):
    """Seconds a session may stay unused before its memory is dropped ($QWEN_SESSION_TTL, default 3600)."""
    return float(_number("QWEN_SESSION_TTL", 3600.0, float, environ))


def max_sessions(environ=None):
    """Most sessions kept in memory at once ($QWEN_MAX_SESSIONS, default 100)."""
    return _number("QWEN_MAX_SESSIONS", 100, int, environ)


def max_request_bytes(environ=None):
    """Largest request body accepted ($QWEN_MAX_REQUEST_MB, default 16), in bytes."""
    return int(_number("QWEN_MAX_REQUEST_MB", 16.0, float, environ) * 2**20)


def notice_closed_pages_within(seconds):
    """Have Gradio's heartbeat notice a closed page within `seconds` (GRADIO_HEARTBEAT_INTERVAL, read by
    Gradio when it serves a page), unless the environment already says otherwise. For the load test and
    the tests, which want freed sessions at once; a deployment keeps Gradio's default."""
    os.environ.setdefault("GRADIO_HEARTBEAT_INTERVAL", str(seconds))
