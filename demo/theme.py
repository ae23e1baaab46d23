"""How the page looks: the Gradio theme, the Okabe-Ito palette, plotly templates, and where the page's
CSS and JavaScript live (demo/static/, loaded by Gradio from there).

Gradio 6 takes `theme`, `css_paths` and `head_paths` in `demo.launch(...)`, not in `gr.Blocks(...)`:

    demo.launch(**launch_options())

    static/app.css          the page's styles; starts with OKABE_ITO as CSS custom properties (--okabe-ito-blue,
                            --okabe-ito-blue-rgb, ...), equal to the palette here (tests/test_static.py)
    static/stepper.css      the step-through view's styles
    static/head.html        <meta name="color-scheme">
    static/stepper-keys.html  the step-through view's keys and its queue of presses (a <script>)
    static/presenter.js     PRESENTER_JS, run by the presenter checkbox's change event
    static/full-marks.js    FULL_MARKS_JS, run by the race's full-marks checkbox: every token's mark shown
    static/lang.js          LANG_JS, run when the language changes: <html lang>, and `lang-zh` on <body>
    static/race-replay.html  the race's replay of its measured times (script and its styles)
    static/look.js          what the stepper's events report about the browser (demo.stepper.ui.LOOK_JS)

Fonts are the system's own (no web font is fetched). Colours come from the Okabe-Ito palette, which
stays distinguishable for colour-blind viewers; every colour code on the page is doubled by a mark
that needs no colour (underline, bold), but for accepted drafts, a faint tint unless full marks are on
(demo/tokens.py). Presenter mode is the CSS class `presenter` on <body>, toggled by the shared checkbox
(PRESENTER_JS): bigger type, stronger contrast. The Chinese page (LANG_JS) hides Gradio's English footer.

Plotly figures do not follow the page's dark mode, so figures pick a template explicitly:
`plotly_template(dark=False)` / `plotly_template(dark=True)`.
"""
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}

SYSTEM_FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Noto Sans", "Helvetica Neue", "Arial",
                "PingFang SC", "Microsoft YaHei", "Noto Sans CJK SC", "WenQuanYi Micro Hei",
                "sans-serif"]
MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "DejaVu Sans Mono", "monospace"]

THEME = gr.themes.Soft(primary_hue="blue", secondary_hue="orange", neutral_hue="slate",
                       text_size=gr.themes.sizes.text_lg, font=SYSTEM_FONTS, font_mono=MONO_FONTS)

STATIC = Path(__file__).resolve().parent / "static"
CSS_PATHS = [STATIC / "app.css", STATIC / "stepper.css"]       # the page's styles; the stepper view's
HEAD_PATHS = [STATIC / "head.html", STATIC / "stepper-keys.html",   # <meta color-scheme>; the stepper's keys;
              STATIC / "race-replay.html", STATIC / "step-figures.html"]   # the race's replay; the step view's figures


def static_text(name):
    """A file of demo/static/ as text (the JavaScript functions that events run in the browser)."""
    return (STATIC / name).read_text(encoding="utf-8")


# run in the browser when the presenter checkbox changes (also when a deep link sets it), when the
# full-marks checkbox changes, and when the language changes
PRESENTER_JS = static_text("presenter.js")
FULL_MARKS_JS = static_text("full-marks.js")
LANG_JS = static_text("lang.js")


def launch_options():
    """The keyword arguments of demo.launch() that style the page (Gradio 6 takes them there)."""
    return {"theme": THEME, "css_paths": CSS_PATHS, "head_paths": HEAD_PATHS}


def plotly_template(dark=False):
    """An explicit plotly template for the page's light or dark mode, with the Okabe-Ito colourway."""
    fg, bg, grid = ("#e5e7eb", "#0b0f19", "#374151") if dark else ("#1f2937", "#ffffff", "#e5e7eb")
    colourway = [c for name, c in OKABE_ITO.items() if name != ("black" if dark else "yellow")]
    axis = {"gridcolor": grid, "zerolinecolor": grid, "linecolor": grid, "tickcolor": grid}
    return go.layout.Template(layout={
        "paper_bgcolor": bg, "plot_bgcolor": bg, "colorway": colourway,
        "font": {"family": ", ".join(SYSTEM_FONTS), "color": fg, "size": 15},
        "xaxis": axis, "yaxis": axis, "legend": {"bgcolor": bg},
        "coloraxis": {"colorscale": "RdBu"}, "hoverlabel": {"font": {"size": 14}},
    })
