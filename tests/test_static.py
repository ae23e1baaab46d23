"""The page's CSS and JavaScript files (demo/static/): the CSS palette equals the Python one the plotly
figures use, palette colours are written only there, every file the launch options name exists, and the
CSS avoids what Gradio's re-serialisation of it would silently drop. And the demo's source, read as text:
one reader of the environment, the settings it reads all in the README, no module importing app.py."""
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from demo import environment, theme
from demo.stepper import ui

ROOT_DIR = Path(__file__).resolve().parent.parent

CSS_FILES = list(theme.CSS_PATHS)
APP_CSS = theme.STATIC / "app.css"
ROOT = re.compile(r":root\s*\{([^{}]*)\}")


def rgb(hex_colour):
    h = hex_colour.lstrip("#")
    return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))


def css_name(name):
    return "--okabe-ito-" + name.replace("_", "-")


def without_comments(css):
    return re.sub(r"/\*.*?\*/", "", css, flags=re.S)


def palette_block():
    blocks = ROOT.findall(without_comments(APP_CSS.read_text(encoding="utf-8")))
    assert len(blocks) == 1, "app.css has one :root block, the palette"
    return dict(re.findall(r"(--[\w-]+)\s*:\s*([^;]+);", blocks[0]))


def test_css_palette_equals_the_python_palette():
    declared = palette_block()
    expected = {}
    for name, colour in theme.OKABE_ITO.items():
        expected[css_name(name)] = colour.upper()
        expected[css_name(name) + "-rgb"] = ", ".join(map(str, rgb(colour)))
    assert {k: v.strip().upper() for k, v in declared.items()} == expected


def test_every_palette_variable_used_is_declared():
    declared = palette_block()
    for path in CSS_FILES:
        used = set(re.findall(r"var\((--okabe-ito-[\w-]+)\)", path.read_text(encoding="utf-8")))
        assert used, f"{path.name} uses the palette"
        assert used <= declared.keys(), f"{path.name}: {used - declared.keys()} not in app.css's :root"


@pytest.mark.parametrize("path", CSS_FILES, ids=lambda p: p.name)
def test_palette_colours_are_written_only_in_the_palette(path):
    """Outside app.css's :root, a palette colour is var(--okabe-ito-...), never its code (black, the
    presenter's contrast colour with white, is the exception)."""
    css = ROOT.sub("", without_comments(path.read_text(encoding="utf-8")))
    hexes = {h.upper() for h in re.findall(r"#[0-9a-fA-F]{6}\b", css)}
    triplets = {tuple(map(int, m)) for m in re.findall(r"rgba?\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", css)}
    for name, colour in theme.OKABE_ITO.items():
        if name == "black":
            continue
        assert colour.upper() not in hexes, f"{path.name} writes {name} as {colour}"
        assert rgb(colour) not in triplets, f"{path.name} writes {name} as rgb{rgb(colour)}"


SHORTHANDS = ("text-decoration", "outline", "border", "border-left", "border-right", "border-top", "border-bottom",
              "background", "font", "margin", "padding", "animation", "transition", "flex")
NOT_LONGHANDS = ("border-radius", "border-collapse", "border-spacing", "outline-offset", "text-decoration-skip-ink")


def is_longhand_of(prop, shorthand):
    return prop.startswith(shorthand + "-") and not prop.startswith(NOT_LONGHANDS)


@pytest.mark.parametrize("path", CSS_FILES, ids=lambda p: p.name)
def test_no_var_in_a_shorthand_that_a_longhand_follows(path):
    """Gradio re-serialises custom CSS through the browser's CSSOM; a shorthand holding var() followed by
    one of its longhands in the same rule comes back empty (the draft underline vanished that way)."""
    for body in re.findall(r"\{([^{}]*)\}", without_comments(path.read_text(encoding="utf-8"))):
        props = [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"([\w-]+)\s*:\s*([^;]+)", body)]
        for i, (prop, value) in enumerate(props):
            if prop in SHORTHANDS and "var(" in value:
                later = [p for p, _ in props[i + 1:] if is_longhand_of(p, prop)]
                assert not later, f"{path.name}: `{prop}: {value.strip()}` then {later}"


class _Head(HTMLParser):
    def __init__(self):
        super().__init__()
        self.top, self.depth, self.script = [], 0, ""

    def handle_starttag(self, tag, attrs):
        if self.depth == 0:
            self.top.append(tag)
        if tag not in ("meta", "link"):
            self.depth += 1

    def handle_endtag(self, tag):
        self.depth -= 1

    def handle_data(self, data):
        if self.top and self.top[-1] == "script" and self.depth:
            self.script += data


def test_launch_options_name_files_that_exist_and_head_files_hold_only_head_elements():
    options = theme.launch_options()
    assert "css" not in options and "head" not in options
    assert options["css_paths"] == theme.CSS_PATHS and options["head_paths"] == theme.HEAD_PATHS
    for path in theme.CSS_PATHS + theme.HEAD_PATHS:
        assert path.is_file() and path.parent == theme.STATIC
    tags = {}
    for path in theme.HEAD_PATHS:
        head = _Head()
        head.feed(path.read_text(encoding="utf-8"))
        # Gradio parses these with DOMParser and copies only what lands in <head>: meta, script, style, link
        assert set(head.top) <= {"meta", "script", "style", "link"}, (path.name, head.top)
        tags[path.name] = head
    assert tags["head.html"].top == ["meta"]
    keys = tags["stepper-keys.html"]
    assert keys.top == ["script"] and "window.__stepperKeys" in keys.script and "</" not in keys.script


@pytest.mark.parametrize("js", [theme.PRESENTER_JS, theme.FULL_MARKS_JS, theme.LANG_JS, ui.LOOK_JS],
                         ids=["presenter", "full-marks", "lang", "look"])
def test_event_scripts_are_one_function_expression(js):
    """Gradio runs an event's js as a function: the file holds the expression alone (no // comments)."""
    assert re.match(r"^\([\w.,\s]*\)\s*=>\s*\{", js) and js.rstrip().endswith("}")
    assert not re.search(r"(^|\s)//", js)


# --- the demo's source ------------------------------------------------------------------------------------

def source_files(*folders):
    return [p for folder in folders for p in sorted((ROOT_DIR / folder).rglob("*.py"))]


def test_only_demo_environment_reads_the_environment():
    readers = [p.relative_to(ROOT_DIR).as_posix() for p in source_files("demo") + [ROOT_DIR / "app.py"]
               if re.search(r"os\.environ|getenv\(", p.read_text(encoding="utf-8"))]
    assert readers == ["demo/environment.py"]


def test_the_engine_reads_the_environment_in_one_place_too():
    """qwen/environment.py, plus bench.py, which only copies the environment for a child process."""
    readers = [p.relative_to(ROOT_DIR).as_posix() for p in source_files("qwen")
               if re.search(r"os\.environ|getenv\(", p.read_text(encoding="utf-8"))]
    assert readers == ["qwen/bench.py", "qwen/environment.py"]


def test_the_readme_lists_every_variable_the_demo_reads():
    readme = (ROOT_DIR / "README.md").read_text(encoding="utf-8")
    paragraph = readme[readme.index("## Environment variables"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    assert [s.name for s in environment.VARIABLES if f"`{s.name}`" not in paragraph] == []
    read = set(re.findall(r'"((?:QWEN|CPU)_[A-Z_]+)"', (ROOT_DIR / "demo" / "environment.py").read_text(encoding="utf-8")))
    assert read <= {s.name for s in environment.VARIABLES}                  # nothing read that the list leaves out


def test_no_module_outside_the_tests_imports_app():
    importers = [p.relative_to(ROOT_DIR).as_posix() for p in source_files("demo", "qwen")
                 if re.search(r"^\s*(import app\b|from app import)", p.read_text(encoding="utf-8"), re.M)]
    assert importers == []


def test_a_step_figure_travels_as_html_holding_its_json_and_the_page_may_fetch_plotly():
    """demo.stepper.drawn: the figure's JSON comes back whole from the attribute (quotes, <, & and CJK
    escaped), the plotly.js it names exists, and launch options allow exactly that file."""
    import html
    import json
    import re as regex

    import plotly.graph_objects as go

    from demo.stepper import drawn
    fig = go.Figure(go.Bar(x=["a\"b", "<i>&</i>", "验证"], y=[1, 2, 3]), layout={"title": {"text": "it's <b>x</b>"}})
    out = drawn.figure_html(fig)
    found = dict(regex.findall(r'data-(\w+)="([^"]*)"', out))
    assert json.loads(html.unescape(found["fig"])) == json.loads(fig.to_json())
    assert html.unescape(found["plotly"]) == drawn.PLOTLY_URL and drawn.PLOTLY_JS.is_file()
    from demo import page
    assert page.launch_options()["allowed_paths"] == [str(drawn.PLOTLY_JS)]
    assert drawn.figure_html(None) == ""
