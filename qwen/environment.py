"""Every environment variable the engine reads, in one list (the app's own are in demo/environment.py).

    QWEN_MODEL          the model find_model() loads when given none (default: the embedded demo, assets/)
    QWEN_COMPILE_CACHE  where compiled artefacts live (default ~/.cache/qwen-mtp/inductor), one folder
                        per CPU capability; handed to inductor as TORCHINDUCTOR_CACHE_DIR unless that
                        names another folder
    QWEN_COMPILE_WORKERS processes compiling a warm-up's graphs at once, this one included (default: the
                        cores this process may use; 1: no helper processes; qwen/compiled/workers.py)
    CXX                 the C++ compiler inductor builds CPU kernels with (else g++, c++ or clang++ on PATH)
"""
import os


def read(name, default=""):
    """The variable's value, or `default` when it is unset or empty."""
    return os.environ.get(name) or default


def default_for_others(name, value, library_default=None):
    """Set a variable another library reads (e.g. inductor's cache folder), unless the user did.
    subtle: a library may write its own default into the environment when imported (torch._dynamo
    sets TORCHINDUCTOR_CACHE_DIR to /tmp/torchinductor_<user>); that value counts as unset."""
    if os.environ.get(name) in (None, "", library_default):
        os.environ[name] = value
