"""qwen.compiled.internals, every touch of torch's private internals: each applies on the torch it was
written for and does nothing on another; the two changes that make inductor build a small model's graphs
sooner leave what it decides as it was (inductor's own analysis is the reference) and take effect in a
real build."""
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sympy
import torch
from torch._inductor import cpp_builder
from torch._inductor.codegen import cpp as vectorised     # where 2.11 keeps simplify_index_in_vec_range
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from qwen.compiled import internals
from qwen.compiled import host, steps
from qwen.compiled.saved import SavedGraphs

ROOT = Path(__file__).resolve().parent.parent
needs_compiler = pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")
written_for_this_torch = pytest.mark.skipif(not internals.applies(), reason=f"torch {torch.__version__}: the "
                                            f"touchpoints are written for {internals.TESTED_TORCH}x")

x0, x1, x2, ks0, tmp0 = sympy.symbols("x0 x1 x2 ks0 tmp0", integer=True, nonnegative=True)
INDICES = [                                       # shapes of index inductor met in the round graph
    96 * x0 + x1 + 3 * x2 + 384,
    64 * ks0 * x1 + 64 * tmp0 + x2,
    8192 * x0 + tmp0,
    2 * (x1 + x2),                                # a polynomial written as a product
    128 * FloorDiv(x1, 64) + ModularIndexing(x1, 1, 64) + 64,
    512 * x0 + 192 * FloorDiv(x1, 64) + ModularIndexing(x1, 1, 64),
    ModularIndexing(x1, 1, 8),
    FloorDiv(x1, 3) + x2,
]


@written_for_this_torch
def test_an_index_gets_the_stride_inductor_itself_finds(monkeypatch):
    assert internals.simplify_fewer()
    patched = vectorised.simplify_index_in_vec_range
    assert patched.polynomials_unchanged and internals.simplify_fewer()             # idempotent
    assert vectorised.simplify_index_in_vec_range is patched
    for index in INDICES:
        for var in (x1, x2):
            got = vectorised.stride_at(patched(index, var, 8), var)
            with monkeypatch.context() as m:          # inductor as shipped, its recursion included
                m.setattr(vectorised, "simplify_index_in_vec_range", patched.original)
                want = vectorised.stride_at(patched.original(index, var, 8), var)
            # the stride in var within a vector of 8: the one thing the rewritten index is used for
            assert sympy.simplify(got - want) == 0, (index, var, got, want)
    assert patched(INDICES[0], x1, 8) is INDICES[0]                  # a polynomial: returned as it is
    assert patched(INDICES[4], x1, 8) != INDICES[4]                  # FloorDiv of x1: rewritten


@written_for_this_torch
def test_quick_builds_ask_for_o2_and_inlining_only_within_the_block():
    def level():
        flags = cpp_builder._get_optimization_cflags("g++")[0]
        return [f for f in flags if f.startswith("O")] + [f for f in flags if "large-function" in f]
    assert level() == ["O3"]
    elsewhere = []
    with internals.quick_builds():
        assert level() == ["O2", "-param=large-function-insns=100000", "-param=large-function-growth=10000"]
        other = threading.Thread(target=lambda: elsewhere.append(level()))   # the app serving meanwhile
        other.start()
        other.join()
    assert level() == ["O3"] and elsewhere == [["O3"]]
    with internals.quick_builds():               # the params are g++'s: clang is asked for -O2 alone
        assert [f for f in cpp_builder._get_optimization_cflags("clang++")[0] if "param" in f or f.startswith("O")] \
            == ["O2"]


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(37))


def scaled(module, x):
    return torch.tanh(x * module.w).sum(-1) + 0.5


@needs_compiler
@pytest.mark.compile
def test_a_quick_build_runs_the_compiler_at_o2_and_computes_the_same(monkeypatch, tmp_path):
    log = tmp_path / "commands.txt"
    script = tmp_path / "bin" / "g++"            # named so: inductor picks gcc's flags by the name
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {host.cpp_compiler()} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    owner, x = Scale(), torch.randn(3, 37)
    graphs = SavedGraphs(scaled, [owner], "scale", tmp_path / "graphs", dict(steps.WRAPPER_IN_CPP), quick_build=True)
    # subtle: inductor's own patch, not monkeypatch (whose undo deletes a config key under pytest 9.2)
    with torch._inductor.config.patch({"cpp.cxx": (None, str(script))}), torch.no_grad():
        torch.testing.assert_close(graphs((1, False), x), scaled(owner, x))
    builds = graph_builds(log)
    assert builds and all(" -O2 " in f" {b} " and " -O3 " not in f" {b} " for b in builds), builds
    assert all(" --param=large-function-growth=10000 " in f" {b} " for b in builds), builds

    # a later start loads the graph and builds nothing: the library is looked up under the same flags.
    # subtle: a new process also builds inductor's CPU probes (tiny programs: the vector-ISA one, which the
    # later start skips as qwen.compiled does once they passed, and on an AVX-512 host the bfloat16 / AMX
    # checks) unless this cache holds them; whether this process built them there depends on the tests
    # run before, so graph_builds leaves them out.
    torch.save({"owner": owner.state_dict(), "x": x}, tmp_path / "inputs.pt")
    env = dict(os.environ, CXX=str(script), PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}", TORCHINDUCTOR_VEC_ISA_OK="1")
    later = subprocess.run([sys.executable, "-c", LATER_START, str(tmp_path), str(torch.get_num_threads())],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert later.returncode == 0, later.stderr[-3000:]
    assert later.stdout.split()[-2:] == ["loaded", "1"], later.stdout
    assert graph_builds(log) == builds


def graph_builds(log):
    """The compiler's command lines in `log` that build a shared library from a graph's C++ (not from one
    of inductor's CPU probes, whose sources define a *_chk_kernel)."""
    builds = []
    for line in log.read_text().splitlines():
        sources = [Path(word) for word in line.split() if word.endswith(".cpp")]
        if ".so" in line and "-shared" in line and not any("_chk_kernel" in p.read_text() for p in sources if p.exists()):
            builds.append(line)
    return builds


LATER_START = """
import sys, torch
from qwen.compiled import host, steps
from qwen.compiled.saved import SavedGraphs
from test_internals import Scale, scaled
folder, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
inputs, owner = torch.load(folder + "/inputs.pt"), Scale()
owner.load_state_dict(inputs["owner"])
graphs = SavedGraphs(scaled, [owner], "scale", folder + "/graphs", dict(steps.WRAPPER_IN_CPP), quick_build=True)
with torch.no_grad():
    torch.testing.assert_close(graphs((1, False), inputs["x"]), scaled(owner, inputs["x"]))
print("compiled", graphs.compiled, "loaded", graphs.loaded)
"""


@written_for_this_torch
def test_every_touchpoint_applies_on_the_torch_it_was_written_for():
    """On the pinned torch each touchpoint finds what it reaches for (a moved internal would turn it off
    silently, and compiling would quietly get slower)."""
    assert internals.simplify_fewer() and vectorised.simplify_index_in_vec_range.polynomials_unchanged
    with internals.quick_builds():
        assert getattr(cpp_builder._get_optimization_cflags, "reads_chosen_level", False)
    assert isinstance(internals.cpu_has_native_bf16(), bool)
    from torch._dynamo.guards import CheckFunctionManager
    assert CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES is not None
    from torch._inductor import cpu_vec_isa
    internals.skip_proven_isa_probes("/nonexistent", "g++")
    assert getattr(cpu_vec_isa.VecISA.check_build, "trusts_passed_probes", False)


def test_on_another_torch_every_touchpoint_does_nothing(monkeypatch, tmp_path):
    shipped_index = getattr(vectorised, "simplify_index_in_vec_range", None)   # absent from some releases
    shipped_index = getattr(shipped_index, "original", shipped_index)
    shipped_flags = cpp_builder._get_optimization_cflags
    shipped_flags = getattr(shipped_flags, "__wrapped__", shipped_flags)
    monkeypatch.setattr(vectorised, "simplify_index_in_vec_range", shipped_index, raising=False)
    monkeypatch.setattr(cpp_builder, "_get_optimization_cflags", shipped_flags)
    monkeypatch.setattr(torch, "__version__", "99.0.0")
    assert not internals.applies()
    assert internals.simplify_fewer() is False and getattr(vectorised, "simplify_index_in_vec_range") is shipped_index
    with internals.quick_builds():
        assert cpp_builder._get_optimization_cflags is shipped_flags
        assert cpp_builder._get_optimization_cflags("g++")[0] == shipped_flags("g++")[0]
    from torch._inductor import cpu_vec_isa
    shipped_probe = getattr(cpu_vec_isa.VecISA.check_build, "__wrapped__", cpu_vec_isa.VecISA.check_build)
    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", shipped_probe)
    internals.skip_proven_isa_probes(tmp_path, "g++")
    assert cpu_vec_isa.VecISA.check_build is shipped_probe


@written_for_this_torch
def test_vector_isa_probes_that_passed_here_are_trusted_at_a_later_start(monkeypatch, tmp_path):
    """Inductor probes each vector ISA at every start (a build and a new Python process each: seconds of a
    cached start). A probe that passed is recorded in the cache folder and trusted later with the same
    compiler; one that failed is run again, and so is every probe under another compiler."""
    from torch._inductor import cpu_vec_isa
    runs = []

    def probe(isa, code):                       # stands in for the build-and-load inductor does
        runs.append(code)
        return "good" in code
    monkeypatch.setattr(internals, "run_probe", probe)
    monkeypatch.setattr(internals, "isa_probes", {"compiler": None, "trusted": set(), "passed": set()})
    isa = cpu_vec_isa.VecAVX2()
    internals.skip_proven_isa_probes(tmp_path, "/usr/bin/g++")           # a first start: nothing recorded
    assert isa.check_build("good code") and not isa.check_build("bad code") and runs == ["good code", "bad code"]
    internals.record_isa_probes(tmp_path, "/usr/bin/g++")
    for compiler, expected in [("/usr/bin/g++", ["bad code"]), ("/opt/other/g++", ["good code", "bad code"])]:
        runs.clear()                            # a later start, with this compiler
        monkeypatch.setattr(internals, "isa_probes", {"compiler": None, "trusted": set(), "passed": set()})
        internals.skip_proven_isa_probes(tmp_path, compiler)
        assert isa.check_build("good code") and not isa.check_build("bad code")
        assert runs == expected, compiler
