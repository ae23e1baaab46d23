"""Graphs kept in files, one per pass: the skeleton SavedGraphs (saved.py) and AheadGraphs (ahead.py) share. A
graph's file is named by a hash of all it bakes in (the engine's source, its owners' signatures, and what each
kind adds: the pass, the machine, the options), so an edit or another machine misses; a process loads each file
once, or builds the graph and writes its file whole (a partial file moved into place: another process building
the same graph meanwhile never reads half of one). Each kind adds its suffix, its key (self.file(the pass, the
machine, ...)), how it loads a file and how it builds a graph (obtain's load and build).
"""
import hashlib
import logging
import os
import threading
from functools import cache
from pathlib import Path

import torch

log = logging.getLogger("qwen.compile")


@cache
def source_fingerprint():
    """A hash of the engine's source: a saved graph is the traced code, so any edit must miss."""
    digest = hashlib.sha256()
    engine = Path(__file__).resolve().parent.parent                  # qwen/
    for path in sorted(list(engine.glob("*.py")) + list(engine.glob("compiled/*.py"))):
        digest.update(str(path.relative_to(engine)).encode() + path.read_bytes())
    return digest.hexdigest()


def owner_signature(module):
    """What a graph bakes in about a module besides its source: its config and every tensor's
    name, shape, stride and dtype (weights are inputs, so their values are not)."""
    tensors = [(n, t) for n, t in list(module.named_parameters()) + list(module.named_buffers())]
    tensors += [(n, t) for n, t in vars(module).items() if isinstance(t, torch.Tensor)]   # e.g. a draft vocabulary
    return repr((getattr(module, "cfg", None), type(module).__name__,
                 [(n, tuple(t.shape), t.stride(), str(t.dtype)) for n, t in tensors]))


class GraphFiles:
    """fn(*owners, *args) as graphs kept in files under `folder`, one per key: `graphs` {key: [graph, ...]} holds
    this process's, newest first; `loaded` and `compiled` count how they came (from a file, or built here)."""
    SUFFIX = ""                                  # a file's suffix, by kind

    def __init__(self, fn, owners, name, folder):
        self.fn, self.owners, self.name, self.folder = fn, tuple(owners), name, Path(folder)
        self.graphs = {}
        self.loaded, self.compiled = 0, 0
        self.lock = threading.Lock()

    def file(self, *what):
        """The file of the graph that `what` (the pass, the machine, the options) sets apart from the others of
        this function and these owners, in this source."""
        text = repr((self.name, self.fn.__name__, *what, source_fingerprint(),
                     [owner_signature(m) for m in self.owners]))
        return self.folder / f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:32]}{self.SUFFIX}"

    def obtain(self, key, path, load, build, fresh=False):
        """The graph of key: this process's, or load(path), or build(path) (a new graph, its file written whole:
        write_whole). fresh: a new one however (those there refused the arguments), tried first from now on."""
        with self.lock:
            if not fresh and self.graphs.get(key):
                return self.graphs[key][0]       # another thread got it meanwhile
            graph = None
            if not fresh and path.exists():
                try:
                    graph = load(path)
                    self.loaded += 1
                except Exception as e:           # a damaged or foreign file: build instead
                    log.warning("could not load %s (%s: %s); building it again", path, type(e).__name__, e)
            if graph is None:
                graph = build(path)
                self.compiled += 1
            self.graphs[key] = [graph] + self.graphs.get(key, [])
            return graph

    @staticmethod
    def write_whole(path, write):
        """write(partial) a file beside path, then move it to path: whole or not at all, with another process
        writing the same file too."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part{path.suffix}")
        write(partial)
        os.replace(partial, path)
