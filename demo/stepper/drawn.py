"""The step view's figures as HTML that the page draws itself (static/step-figures.html).

A gr.Plot re-mounts its plot for every new value and draws it twice (Gradio 6.31), and a step changes five
figures: most of a step's time in the browser (docs/benchmarks.md, 2026-12-04). Sent as a <div> holding the
figure's JSON instead, each is drawn once, by Plotly.react into a plot that stays on the page from step to
step. The browser loads plotly.js from the plotly package installed here (allowed_paths), at the address each
figure carries."""
import html
from pathlib import Path

import plotly

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
PLOTLY_URL = f"gradio_api/file={PLOTLY_JS.as_posix()}"      # relative to the page, as Spaces serve it


def figure_html(fig):
    """A plotly figure as the element static/step-figures.html draws ("" for no figure: nothing shown)."""
    if fig is None:
        return ""
    return (f'<div class="step-fig" data-plotly="{html.escape(PLOTLY_URL, quote=True)}" '
            f'data-fig="{html.escape(fig.to_json(), quote=True)}"></div>')


def box_value():
    """A figure box's value before its first figure: only plotly.js's address, so that pressing Start can fetch
    it while the run records (static/step-figures.html)."""
    return f'<span hidden data-plotly="{html.escape(PLOTLY_URL, quote=True)}"></span>'


def launch_options():
    """demo.launch() keywords that let the page fetch plotly.js."""
    return {"allowed_paths": [str(PLOTLY_JS)]}
