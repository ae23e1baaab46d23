"""Compiling a warm-up's graphs in parallel, in helper processes (docs/design.md, compiling a first start
sooner): compiling one graph is one thread's work, so where graphs are missing on disk, warm_up compiles
one itself and hands the others to helpers, then loads theirs as a later start would.

    helpers = start(model, head, passes, context)   # the missing graphs but the first go to helpers
    ... the parent compiles the first one meanwhile ...
    helpers.wait()                                  # their graphs are on disk now (saved.py)

A helper (`python -m qwen.compiled.helper`, started here) gets the modules pickled exactly as the parent
prepared them, so each graph it saves has the key the parent looks for; a failed helper's graphs are
left to the parent. Only graphs saved whole (CPU, unfrozen) can be compiled elsewhere.

    QWEN_COMPILE_WORKERS    processes compiling at once, the parent included (default: the cores this
                            process may use; 1 compiles everything in-process)
"""
import logging
import os
import subprocess
import sys
import tempfile

import torch

from qwen import environment
from qwen.compiled import host
from qwen.compiled.host import is_wide
from qwen.compiled.saved import SavedGraphs
from qwen.compiled.view import plain

log = logging.getLogger("qwen.compile")

BATCH = 1                    # warm-up passes are batch 1 (warmup._run_pass)
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # where `-m qwen...` runs


def worker_count():
    """How many processes may compile at once, this one included (QWEN_COMPILE_WORKERS, else the cores
    this process may run on)."""
    value = environment.read("QWEN_COMPILE_WORKERS")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"QWEN_COMPILE_WORKERS must be a whole number, not {value!r}") from None
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                      # not Linux
        return os.cpu_count() or 1


def missing(passes):
    """Of these passes [(CompiledSteps, (T, keep))], those whose graph is saved whole on disk but not
    there yet (nor loaded in this process)."""
    out = []
    for part, variant in passes:
        graphs = part.fn
        if part.enabled and isinstance(graphs, SavedGraphs) and (variant, BATCH) not in graphs.graphs \
                and not graphs.path(variant, BATCH).exists():
            out.append((part, variant))
    return out


def portable(module):
    """What a helper gets of a model or head (or of its compiled view): the module alone, weights laid
    out as this process has them; the view's steps (locks, functions, this process's graphs) stay here."""
    return plain(module)


class Helpers:
    """Helper processes compiling some passes' graphs; wait() for them."""

    def __init__(self, handed_off, processes, job_file):
        self.handed_off = handed_off            # [(CompiledSteps, (T, keep))] the helpers compile
        self.processes = processes              # [(Popen, file of its messages)]
        self.job_file = job_file                # the pickled modules, removed once all are done

    def wait(self):
        """Wait for every helper. -> the passes whose graphs they saved (a failed helper's are left for
        the parent to compile)."""
        for process, log_file in self.processes:
            if process.wait() != 0:
                lines = [line for line in open(log_file, errors="replace").read().splitlines() if line.strip()]
                log.warning("a compile helper failed (exit %s): %s", process.returncode,
                            lines[-1][:300] if lines else "no message")
        for path in [self.job_file] + [log_file for _, log_file in self.processes]:
            if path and os.path.exists(path):
                os.unlink(path)
        self.processes, self.job_file = [], None           # waited for: a second wait() (on an error) returns at once
        return [(part, v) for part, v in self.handed_off if part.fn.path(v, BATCH).exists()]


def start(model, head, passes, context, workers=None):
    """Start helper processes for these passes' graphs that are missing on disk, all but the first
    (the caller compiles that one meanwhile), spread over workers - 1 helpers. -> Helpers"""
    workers = worker_count() if workers is None else workers
    todo = missing(passes)[1:]
    if workers < 2 or not todo:
        return Helpers([], [], None)
    shares = [todo[i::workers - 1] for i in range(min(workers - 1, len(todo)))]
    if is_wide(model):                          # there memory matters more than time
        log.info("no compile helpers: a wide model compiles in this process (a helper would copy its weights)")
        return Helpers([], [], None)
    weights = host.weight_bytes([m for m in (model, head) if m is not None], buffers=True)    # what a helper loads
    fits, why = host.copies_fit(weights, len(shares))
    if not fits:
        log.info("no compile helpers: %s", why)
        return Helpers([], [], None)
    fd, job_file = tempfile.mkstemp(prefix="qwen-compile-", suffix=".pt")
    os.close(fd)
    try:
        torch.save({"model": portable(model), "head": portable(head) if head is not None else None,
                    "context": context, "threads": torch.get_num_threads()}, job_file)
    except Exception as e:                      # e.g. a module holding something that does not pickle
        log.warning("no compile helpers: the modules could not be handed over (%s: %s)", type(e).__name__, e)
        os.unlink(job_file)
        return Helpers([], [], None)
    processes = []
    for share in shares:
        jobs = [f"{part.kind}:{T}:{int(keep)}" for part, (T, keep) in share]
        # its messages go to a file: a pipe nobody reads until the end could fill and stall it
        fd, log_file = tempfile.mkstemp(prefix="qwen-compile-", suffix=".log")
        try:
            with os.fdopen(fd, "w") as err:
                processes.append((subprocess.Popen([sys.executable, "-m", "qwen.compiled.helper", job_file, *jobs],
                                                   stdout=subprocess.DEVNULL, stderr=err, cwd=PACKAGE_PARENT),
                                  log_file))
        except OSError as e:                    # no helper after all: the parent compiles its share
            log.warning("could not start a compile helper (%s)", e)
            os.unlink(log_file)
    log.info("compiling %d graph(s) in %d helper process(es)", len(todo), len(processes))
    return Helpers(todo, processes, job_file)
