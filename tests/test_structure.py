"""The project's shape, checked from its source: compiling lives in qwen/compiled/ alone, the model's
modules import none of it, no module of qwen/, demo/ or tools/ imports itself back, function-level imports
included, and neither the engine nor the app imports the measuring tools."""
import ast
from pathlib import Path

QWEN = Path(__file__).resolve().parent.parent / "qwen"
PACKAGES = ("qwen", "demo", "tools")            # the engine, the app, the measuring tools
MODEL_MODULES = ["attention", "cache", "chunk", "config", "deltanet", "embedding", "layer", "mlp",
                 "model", "mtp", "norm", "rope", "sample", "weights"]


def module_name(path):
    parts = path.relative_to(QWEN.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def ours(name):
    return name.split(".")[0] in PACKAGES


def imports(path):
    """Every module of the project this file imports, at any level (a function's body included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if ours(a.name)}
        elif isinstance(node, ast.ImportFrom) and node.module and ours(node.module):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}     # `from qwen.compiled import host`
    return found


def graph():
    modules = {module_name(p): p for package in PACKAGES for p in (QWEN.parent / package).rglob("*.py")}
    return {name: {m for m in imports(p) if m in modules and m != name} for name, p in modules.items()}


def test_the_model_modules_import_nothing_that_compiles():
    edges = graph()
    for name in MODEL_MODULES:
        assert not [m for m in edges[f"qwen.{name}"] if m.startswith("qwen.compiled")], name


def test_no_module_of_the_project_imports_itself_back():
    edges, cycles = graph(), []

    def visit(name, path):
        for nxt in edges[name]:
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(name)
    done = set()
    for name in sorted(edges):
        if name not in done:
            visit(name, [name])
    # a package imports its own modules to re-export them: qwen.compiled -> qwen.compiled.steps is no cycle
    cycles = [c for c in cycles if not any(b.startswith(a + ".") for a, b in zip(c, c[1:]) if a not in PACKAGES)]
    assert cycles == []


def test_the_engine_and_the_app_import_no_measuring_tool():
    edges = graph()
    assert {(name, m) for name in edges if not name.startswith("tools") for m in edges[name]
            if m.startswith("tools")} == set()


def test_the_checker_sees_a_function_level_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from qwen.compiled.steps import dense\n    import qwen.mtp\n")
    assert imports(f) == {"qwen.compiled.steps", "qwen.compiled.steps.dense", "qwen.mtp"}


def test_the_model_modules_name_nothing_of_torchs_compiler():
    """Compiled graphs swap modules in (qwen.compiled.streamed) rather than the layers branching on
    compiling, and the compiled side marks its own inputs: no model module mentions the compiler."""
    words = ("torch.compiler", "torch._dynamo", "torch._inductor", "is_compiling", "mark_dynamic")
    found = {(name, w) for name in MODEL_MODULES for w in words if w in (QWEN / f"{name}.py").read_text()}
    assert found == set()


def test_the_rounds_run_the_main_model_in_one_place():
    """Every round, step by step or as one call (greedy_round), runs the main model over its rows through
    verify_pass; besides it only recompute's re-run (roll_back) and the prompt's pass (prefill) do."""
    passes = {"step", "step_pass", "forward_hidden", "hidden", "run", "forward"}
    callers = set()
    for fn in ast.walk(ast.parse((QWEN / "mtp.py").read_text())):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in passes \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "model":
                    callers.add(fn.name)
    assert callers == {"verify_pass", "roll_back", "prefill"}


def callers_of(names, roots):
    """{(file, function)} of every function in the .py files under `roots` that calls one of `names` (by name or as
    an attribute: costs.from_lanes)."""
    found = set()
    for root in roots:
        for path in root.rglob("*.py"):
            for fn in ast.walk(ast.parse(path.read_text())):
                if isinstance(fn, ast.FunctionDef):
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Call):
                            name = getattr(node.func, "attr", getattr(node.func, "id", None))
                            if name in names:
                                found.add((path.name, fn.name))
    return found


def test_one_timer_turns_lanes_into_costs_and_one_table_keeps_them():
    """Every measured cost (the race's verdict, the stepper's what-if, k="auto", the benches) comes from lanes
    through qwen.costs.measure and is kept in qwen.costs.TABLE: nothing else turns lanes into terms, times a
    prompt's pass or keeps costs of its own; and one clock times every lane's items, the race's included."""
    roots = [QWEN, QWEN.parent / "demo"]
    assert callers_of({"timed_items"}, roots) == {("costs.py", "timed_lane"), ("race.py", "_drive")}
    assert callers_of({"from_lanes"}, roots) == {("costs.py", "measure")}
    assert callers_of({"prefill_seconds"}, roots) == {("costs.py", "with_prompt_pass")}
    assert {fn for _, fn in callers_of({"measure"}, roots)} == {"length_seconds", "measure_terms", "lane_terms"}


def private_uses(path):
    """[(line, name)] where this file takes a `_name` from another module of the project: imports it, reads it off
    the module (`module._name`) or patches it (setattr(module, "_name", ...))."""
    tree, found, modules = ast.parse(path.read_text()), [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and ours(node.module):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("_")]
            modules |= {a.asname or a.name for a in node.names}            # `from demo import race`: a module
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if ours(a.name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "setattr" \
                and len(node.args) > 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in modules \
                and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_"):
            found.append((node.lineno, node.args[1].value))
    return found


def test_no_private_name_is_taken_from_another_module():
    """The app, the tools and the tests use what a module makes public: where one needs an internal, it gets a name."""
    root = QWEN.parent
    found = {(p.relative_to(root).as_posix(), line, name) for folder in ("demo", "tools", "tests")
             for p in (root / folder).rglob("*.py") for line, name in private_uses(p)}
    assert found == set()


def test_the_private_checker_sees_imports_reads_and_patches(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from demo.x import _a, b\nfrom demo import race as r\nimport qwen.costs\n"
                 "r._b\nqwen._c\nmonkeypatch.setattr(r, '_d', 1)\nr.__doc__\nother._e\n")
    assert sorted(private_uses(f)) == [(1, "_a"), (4, "_b"), (5, "_c"), (6, "_d")]


DEMO = QWEN.parent / "demo"


def wide_spots(paths):
    """Functions taking more than 6 positional parameters (self not counted; a `*` makes the rest keyword-only)
    and returns of a tuple literal of 4 or more values: {(file, function or "return", its line's function)}."""
    found = set()
    for path in paths:
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            name = getattr(fn, "name", "<lambda>")
            positional = [a for a in fn.args.posonlyargs + fn.args.args if a.arg != "self"]
            if len(positional) > 6:
                found.add((path.name, name, "parameters"))
            if any(isinstance(node.value, ast.Tuple) and len(node.value.elts) >= 4 for node in own_returns(fn)):
                found.add((path.name, name, "tuple"))
    return found


def own_returns(fn):
    """A function's return statements, not those of the functions defined inside it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def test_the_demo_wires_controls_and_outputs_by_name():
    """A handler takes many values by name (keyword-only parameters, a dict) and returns many as
    {component: value}, so adding a control never means counting positions in several places."""
    assert wide_spots(sorted(DEMO.rglob("*.py"))) == set()


def test_the_wiring_checker_counts_positions_and_tuples(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f(a, b, c, d, e, f, g):\n    return a, b, c, d\n"
                 "def ok(self, a, b, c, d, e, f, *, g):\n    return (a, b, c)\n"
                 "def star(*values):\n    return (*values, 1)\n")
    assert wide_spots([f]) == {("m.py", "f", "parameters"), ("m.py", "f", "tuple")}
