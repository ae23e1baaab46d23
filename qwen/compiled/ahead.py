"""Graphs compiled ahead of time: each pass exported (torch.export) and built by AOTInductor into a package
file, loaded by any process without tracing. What ZeroGPU accepts where it refuses torch.compile: a GPU
process compiles and saves the files, and every later GPU call (a fresh process) loads them
(docs/design.md, ahead-of-time graphs for ZeroGPU).

    graphs = AheadGraphs(model_step, (model,), "model", folder)   # model_step(model, ids, positions, state)
    graphs((T, keep), ids, positions, state)    # loads or builds the package of this pass, then runs it

A package takes tensors only: a pass's State (or a head's AttentionState) goes in as its buffers, in a
fixed order, and comes back to life inside the exported function around them, so the pass writes them in
place as the eager one does. The KV capacity is a dynamic dimension: one package serves every length.
The weights stay the module's own (loaded into the package by reference, not copied into it).
"""
import copy
import dataclasses
import os
import struct
import zipfile

import torch

from qwen.cache import AttentionState, State
from qwen.compiled.files import GraphFiles

# the weights are loaded into a package from the module (load_constants), not built into its library
PACKAGE_OPTIONS = {"aot_inductor.package_constants_in_so": False}


def layer_fields(layer):
    """The names of a layer state's tensor fields, in declaration order (k, v; conv, S, conv_steps, row_decay, row_k, row_delta)."""
    return tuple(f.name for f in dataclasses.fields(layer) if isinstance(getattr(layer, f.name), torch.Tensor))


def flatten(args):
    """A pass's arguments as (tensors, structure): every tensor, a State's and an AttentionState's buffers
    included, and what rebuild() needs to put them back (the states themselves, as templates)."""
    tensors, structure = [], []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            tensors.append(arg)
            structure.append(("tensor",))
        elif isinstance(arg, (State, AttentionState)):
            layers = arg.layers if isinstance(arg, State) else [arg]
            fields = tuple(layer_fields(layer) for layer in layers)
            tensors += [getattr(layer, n) for layer, names in zip(layers, fields) for n in names]
            pad = isinstance(arg, State) and arg.pad is not None
            tensors += [arg.pad] if pad else []
            structure.append(("state", arg, fields, pad))
        else:
            raise TypeError(f"an ahead-of-time pass takes tensors and states, not {type(arg).__name__}")
    return tensors, structure


def rebuild(structure, tensors):
    """flatten()'s arguments again, each state a shallow copy of its template holding these tensors."""
    tensors, args = iter(tensors), []
    for entry in structure:
        if entry[0] == "tensor":
            args.append(next(tensors))
            continue
        _, template, fields, pad = entry
        templates = template.layers if isinstance(template, State) else [template]
        layers = [dataclasses.replace(layer, **{n: next(tensors) for n in names}) for layer, names in zip(templates, fields)]
        if isinstance(template, AttentionState):
            args.append(layers[0])
            continue
        state = copy.copy(template)
        state.layers, state.pad = layers, next(tensors) if pad else None
        args.append(state)
    return args


def structure_key(structure):
    """What a package bakes in about its arguments' structure: the layer kinds, their fields, whether they
    keep step states, padding."""
    key = []
    for entry in structure:
        if entry[0] == "tensor":
            key.append("tensor")
        else:
            layers = entry[1].layers if isinstance(entry[1], State) else [entry[1]]
            key.append((tuple((type(layer).__name__, getattr(layer, "keep_steps", None)) for layer in layers),
                        entry[2], entry[3]))
    return tuple(key)


class Exported(torch.nn.Module):
    """fn(*owners, *args) as a module of tensors only: the owners are its submodules (their weights its
    parameters), the arguments rebuilt from the flat tensors a package is called with."""

    def __init__(self, fn, owners, structure):
        super().__init__()
        self.fn, self.owners, self.structure = fn, torch.nn.ModuleList(owners), structure

    def forward(self, *tensors):
        return self.fn(*self.owners, *rebuild(self.structure, tensors))


def dynamic_shapes(structure):
    """dim 2 of every KV buffer (its capacity) dynamic, every other size fixed: one Dim per state."""
    shapes = []
    for i, entry in enumerate(structure):
        if entry[0] == "tensor":
            shapes.append(None)
            continue
        capacity = torch.export.Dim(f"capacity{i}", min=2, max=1 << 20)
        for names in entry[2]:
            shapes += [{2: capacity} if n in ("k", "v") else None for n in names]
        shapes += [None] if entry[3] else []
    return (tuple(shapes),)


class AheadGraphs(GraphFiles):
    """fn(*owners, *args) built ahead of time once per (pass, batch, structure), from its package file
    when one was saved (files.py: the file, the lock, the counters); loaded once per process (a ZeroGPU
    call runs in a fresh one)."""
    SUFFIX = ".pt2"

    def __init__(self, fn, owners, name, folder):
        super().__init__(fn, owners, name, folder)
        self.pid = os.getpid()                   # whose loaded packages `graphs` holds

    def __call__(self, variant, *args):
        tensors, structure = flatten(args)
        key = (variant, tensors[0].shape[0], structure_key(structure))
        if self.pid != os.getpid():              # a forked process: its parent's loaded packages are not its own
            self.graphs, self.pid = {}, os.getpid()
        graphs = self.graphs.get(key) or [self._load_or_build(key, structure, tensors)]
        return graphs[0](*tensors)

    def path(self, key):
        device = next(self.owners[0].parameters()).device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else torch.backends.cpu.get_cpu_capability()
        return self.file(key, torch.__version__, name)

    def _load_or_build(self, key, structure, tensors):
        module = Exported(self.fn, self.owners, structure)

        def build(path):
            self._build(module, structure, tensors, path)
            return self._load(path, module)
        return self.obtain(key, self.path(key), lambda path: self._load(path, module), build)

    def _build(self, module, structure, tensors, path):
        with torch.inference_mode(False), torch.no_grad():      # export writes to ordinary tensors only
            examples = tuple(t.clone() for t in tensors)
            exported = torch.export.export(module, examples, dynamic_shapes=dynamic_shapes(structure))

        def package(partial):
            torch._inductor.aoti_compile_and_package(exported, package_path=str(partial),
                                                     inductor_configs=PACKAGE_OPTIONS)
            clear_exec_stacks(partial)
        self.write_whole(path, package)

    @staticmethod
    def _load(path, module):
        """The package at path, given the module's own weights (by reference: no copy)."""
        graph = torch._inductor.aoti_load_package(str(path))
        named = dict(module.named_parameters(remove_duplicate=False)) | dict(module.named_buffers(remove_duplicate=False))
        named |= {f"{prefix}.{n}" if prefix else n: t for prefix, m in module.named_modules()
                  for n, t in vars(m).items() if isinstance(t, torch.Tensor)}
        graph.load_constants({n: named[n] for n in graph.get_constant_fqns()}, check_full_update=True, user_managed=True)
        return graph


PT_GNU_STACK, PF_X = 0x6474E551, 0x1         # ELF: the program header for the stack, and its "executable" flag


def without_exec_stack(library):
    """A shared library's bytes with its stack marked not executable. AOTInductor links its weights'
    object without a .note.GNU-stack section, so the linker asks for an executable stack for the whole
    library, and a recent glibc refuses to load such a library (Hugging Face's `spaces` clears the same
    flag on ZeroGPU). Bytes that are not a 64-bit little-endian ELF come back as they were."""
    data = bytearray(library)
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return library
    (table,) = struct.unpack_from("<Q", data, 0x20)               # e_phoff
    entry_size, entries = struct.unpack_from("<HH", data, 0x36)   # e_phentsize, e_phnum
    for at in range(table, table + entry_size * entries, entry_size):
        kind, flags = struct.unpack_from("<II", data, at)         # p_type, p_flags
        if kind == PT_GNU_STACK:
            struct.pack_into("<I", data, at + 4, flags & ~PF_X)
    return bytes(data)


def clear_exec_stacks(package):
    """Rewrite a package file (a zip archive) with every shared library in it through without_exec_stack."""
    with zipfile.ZipFile(package) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    rewritten = f"{package}.rewrite"
    with zipfile.ZipFile(rewritten, "w") as archive:
        for info, data in members:
            archive.writestr(info, without_exec_stack(data) if info.filename.endswith(".so") else data)
    os.replace(rewritten, package)
