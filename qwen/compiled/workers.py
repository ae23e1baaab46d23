"""Compiling a warm-up's graphs: each by making its pass once as decoding does (run_pass), in this process or,
in parallel, in helper processes (docs/design.md, compiling a first start sooner): compiling one graph is one
thread's work, so where graphs are missing on disk, warm_up compiles one itself and hands the others to helpers,
then loads theirs as a later start would.

    helpers = start(model, head, passes, context)   # the missing graphs but the first go to helpers
    run_pass(model, head, part, variant, ids)       # ... the parent compiles the first one meanwhile
    helpers.wait()                                  # their graphs are on disk now (saved.py)

A helper is a process running main() (started by start(), never by hand) with the modules pickled exactly as
the parent prepared them, so each graph it saves has the key the parent looks for; a failed helper's graphs are
left to the parent. Only graphs saved whole (CPU, unfrozen) can be compiled elsewhere.

    QWEN_COMPILE_WORKERS    processes compiling at once, the parent included (default: the cores this
                            process may use; 1 compiles everything in-process)
"""
import logging
import os
import subprocess
import sys
import tempfile
import threading

import torch

from qwen import environment
from qwen.cache import AttentionState, State, keep_step_states
from qwen.compiled import host
from qwen.compiled.host import Strategy, is_wide
from qwen.compiled.saved import SavedGraphs, model_step, round_of, sampled_round_of
from qwen.compiled.steps import _prepare, head_graph
from qwen.compiled.view import CompiledHead, CompiledModel, plain
from qwen.mtp import generate_mtp

log = logging.getLogger("qwen.compile")

BATCH = 1                    # warm-up passes are batch 1 (run_pass)
SAMPLED = dict(temperature=0.8, seed=0)      # how a sampled round graph is compiled, checked and timed
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # where helpers run
# a helper's program (`python -c`; `-m qwen.compiled.workers` would run a second copy of this module, which
# qwen.compiled has imported by then)
HELPER_MAIN = "import sys; from qwen.compiled.workers import main; main(sys.argv[1:])"


def warm_up_ids(model, context):
    """The prompt warm-up passes run on: (1, context) token ids."""
    device = model.embed_tokens.weight.device
    return torch.arange(1, context + 1, device=device)[None] % model.cfg.vocab_size


def run_pass(model, head, part, variant, ids):
    """Make one pass of `part` (a model's, head's or round's CompiledSteps) the way decoding does,
    after a prefill of ids: the first such call compiles its graph (or loads it from disk)."""
    T, keep = variant
    context = ids.shape[1]
    if part.kind == "model":
        state = State(model)
        model.hidden(ids, state)
        keep_step_states(state, T, on=keep)
        model.forward(ids[:, :T], state)
    elif part.kind == "head":
        hidden = torch.zeros(1, context, model.cfg.hidden_size, dtype=model.embed_tokens.weight.dtype,
                             device=ids.device)
        cache = AttentionState()
        head(model.embed_tokens(ids), hidden, 0, cache)
        head(model.embed_tokens(ids[:, :T]), hidden[:, :T], context, cache)
    else:                                                                          # compiles round k
        generate_mtp(model, head, ids[:, :8], max_new_tokens=2 * T, k=T - 1,
                     **(SAMPLED if part.kind == "sampled_round" else {}))


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
        # a helper gets the modules alone (not their views: steps, locks, this process's graphs), weights laid
        # out as this process has them
        torch.save({"model": plain(model), "head": plain(head), "context": context,
                    "threads": torch.get_num_threads()}, job_file)
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
                processes.append((subprocess.Popen([sys.executable, "-c", HELPER_MAIN, job_file, *jobs],
                                                   stdout=subprocess.DEVNULL, stderr=err, cwd=PACKAGE_PARENT),
                                  log_file))
        except OSError as e:                    # no helper after all: the parent compiles its share
            log.warning("could not start a compile helper (%s)", e)
            os.unlink(log_file)
    log.info("compiling %d graph(s) in %d helper process(es)", len(todo), len(processes))
    return Helpers(todo, processes, job_file)


def main(argv):
    """A helper process (HELPER_MAIN JOB_FILE kind:T:keep ..., started by start()): compile and save the graphs
    of the passes named "kind:T:keep" (kind: model, head, round or sampled_round) for the modules in the job file,
    then exit."""
    # subtle: a graph's guards check what its tensors are, so the weights must not become inference tensors
    # (loaded under inference_mode) where the parent's are not, nor the thread count differ
    job = torch.load(argv[0], weights_only=False)
    torch.set_num_threads(job["threads"])
    model, head = job["model"], job["head"]
    kinds = {"model": ([model], model_step), "head": head_graph(head, model), "round": ([model, head], round_of),
             "sampled_round": ([model, head], sampled_round_of)}
    ids = warm_up_ids(model, job["context"])                 # (1, context)
    for name in argv[1:]:
        kind, T, keep = name.split(":")
        variant = (int(T), bool(int(keep)))
        modules, fn = kinds[kind]
        # only this pass compiles: every other one runs eagerly here
        steps = _prepare(modules, fn, {variant}, kind, (Strategy.STREAMED, "a helper compiles saved graphs"))
        steps.warming_thread = threading.get_ident()          # a failure ends the helper with its error
        fast = CompiledModel(model, steps if kind == "model" else None)
        fast_head = None
        if head is not None:
            fast_head = CompiledHead(head, steps if kind == "head" else None)
            fast_head.rounds = steps if kind == "round" else None
            fast_head.sampled_rounds = steps if kind == "sampled_round" else None
        with torch.inference_mode():                        # as warm_up runs it
            run_pass(fast, fast_head, steps, variant, ids)

