"""How the page looks: the Gradio theme, the CSS, the Okabe-Ito palette, plotly templates.

Gradio 6 takes `theme`, `css` and `head` in `demo.launch(...)`, not in `gr.Blocks(...)`:

    demo.launch(**launch_options())

Fonts are the system's own (no web font is fetched). Colours come from the Okabe-Ito palette, which
stays distinguishable for colour-blind viewers; every colour code on the page is doubled by a mark
that needs no colour (underline, box, bold). Presenter mode is the CSS class `presenter` on <body>,
toggled by the shared checkbox (PRESENTER_JS): bigger type, stronger contrast.

Plotly figures do not follow the page's dark mode, so figures pick a template explicitly:
`plotly_template(dark=False)` / `plotly_template(dark=True)`.
"""
import gradio as gr
import plotly.graph_objects as go

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}
# what each token origin looks like (render.py uses the class names, the legend shows them)
ORIGIN_COLOURS = {"main": "#999999", "draft": OKABE_ITO["sky_blue"], "correction": OKABE_ITO["vermillion"],
                  "bonus": OKABE_ITO["bluish_green"]}

SYSTEM_FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Noto Sans", "Helvetica Neue", "Arial",
                "PingFang SC", "Microsoft YaHei", "Noto Sans CJK SC", "WenQuanYi Micro Hei",
                "sans-serif"]
MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "DejaVu Sans Mono", "monospace"]

THEME = gr.themes.Soft(primary_hue="blue", secondary_hue="orange", neutral_hue="slate",
                       text_size=gr.themes.sizes.text_lg, font=SYSTEM_FONTS, font_mono=MONO_FONTS)

CSS = """
.app-header h1 { font-size: 2rem; margin: 0.2em 0; }
.app-header p { font-size: 1.1rem; opacity: 0.85; margin: 0; }
.lane-title h3 { margin: 0; font-size: 1.35rem; }
.lane-title p { margin: 0; opacity: 0.75; }
.race-text {
  font-size: 1.25rem; line-height: 1.75; white-space: pre-wrap; overflow-wrap: anywhere;
  min-height: 7em; max-height: 24em; overflow-y: auto; padding: 0.6em 0.8em;
  border: 1px solid var(--border-color-primary); border-radius: 10px;
  background: var(--background-fill-secondary); color: var(--body-text-color);
}
.race-text .nl { opacity: 0.35; font-size: 0.8em; user-select: none; }
.race-text.empty { opacity: 0.6; font-style: italic; }
.race-text .cursor { animation: blink 1s steps(1) infinite; color: var(--color-accent); }
@keyframes blink { 50% { opacity: 0; } }
.race-text .end-mark { font-size: 0.7em; padding: 0 0.3em; border-radius: 4px; margin-left: 0.2em;
  background: var(--neutral-200); color: var(--neutral-700); vertical-align: middle; }
.dark .race-text .end-mark { background: var(--neutral-700); color: var(--neutral-100); }

/* token origins: colour AND a mark that needs no colour */
.tok { border-radius: 3px; box-shadow: inset -1px 0 rgba(127, 127, 127, 0.5); }   /* token boundaries */
.tok-draft { background: rgba(86, 180, 233, 0.30); text-decoration: underline solid #0072B2;
  text-decoration-thickness: 0.12em; text-underline-offset: 0.2em; }
.tok-correction { background: rgba(213, 94, 0, 0.22); outline: 2px dashed #D55E00; outline-offset: -1px; }
.tok-bonus { background: rgba(0, 158, 115, 0.28); font-weight: 800; }
.dark .tok-draft { text-decoration-color: #56B4E9; }
.dark .tok-correction { outline-color: #E69F00; }

.legend { display: flex; flex-wrap: wrap; gap: 0.4em 1.2em; font-size: 0.95rem; margin-top: 0.4em; }
.legend .tok { padding: 0 0.35em; }

.race-stats { display: flex; flex-wrap: wrap; gap: 0.4em 1.4em; align-items: baseline; min-height: 3.2em; }
.race-stats .stat { display: flex; flex-direction: column; }
.race-stats .num { font-size: 1.7rem; font-weight: 700; font-variant-numeric: tabular-nums; line-height: 1.1; }
.race-stats .lbl { font-size: 0.85rem; opacity: 0.75; }
.race-stats .ended { font-size: 0.9rem; opacity: 0.8; align-self: center; }

.verdict { font-size: 1.3rem; padding: 0.6em 0.9em; border-radius: 10px; border-left: 8px solid #0072B2;
  background: var(--background-fill-secondary); }
.verdict.ok { border-left-color: #009E73; }
.verdict.bad { border-left-color: #D55E00; }
.verdict .speedup { display: block; margin-top: 0.3em; font-size: 1.1rem; }
.verdict:empty { display: none; }

.run-button { min-height: 3.2em; font-size: var(--text-lg) !important; }
.verdict .speed-line { display: block; margin-top: 0.25em; font-size: 1rem; }
.verdict .speedup.down { color: #D55E00; }
.dark .verdict .speedup.down { color: #E69F00; }

/* a phone: a compact header, so the prompt and Run fit the first screen */
@media (max-width: 700px) {
  .app-header h1 { font-size: 1.3rem; line-height: 1.25; }
  .app-header p { font-size: 0.85rem; }
  #presenter .info-text, #model .info-text, #race-examples-note { display: none; }
  #model-status { display: none; }          /* a failed load still shows as a toast */
}

/* presenter mode: bigger type, stronger contrast (projector distance, bright rooms). Its sizes are
   !important: Gradio scopes the rules above under .gradio-container, which outranks `body.presenter`.
   :root raises the specificity above the theme's own `:root .dark { ... }` variables. */
:root body.presenter, :root body.presenter .dark {
  --text-xxs: 13px; --text-xs: 15px; --text-sm: 18px; --text-md: 21px; --text-lg: 26px; --text-xl: 31px;
  --text-xxl: 36px; --body-text-color-subdued: var(--body-text-color);
}
body.presenter .race-text { font-size: 2rem !important; line-height: 1.8 !important; color: #000 !important;
  background: #fff !important; border: 2px solid #000 !important; max-height: 30em !important; }
body.presenter.dark .race-text, body.presenter .dark .race-text { color: #fff !important; background: #000 !important;
  border-color: #fff !important; }
body.presenter .race-stats .num { font-size: 2.6rem !important; }
body.presenter .race-stats .lbl, body.presenter .lane-title p { opacity: 1; }
body.presenter .verdict { font-size: 1.9rem !important; }
body.presenter .verdict .speed-line { font-size: 1.45rem !important; }
body.presenter .tok-draft { background: rgba(86, 180, 233, 0.45); text-decoration-thickness: 0.16em; }
body.presenter .tok-correction { background: rgba(213, 94, 0, 0.35); outline-width: 3px; }
body.presenter .tok-bonus { background: rgba(0, 158, 115, 0.45); }
body.presenter .app-header h1 { font-size: 2.6rem !important; }
body.presenter .legend, body.presenter .verdict .speedup { font-size: 1.5rem !important; }
body.presenter .race-stats .lbl, body.presenter .race-stats .ended { font-size: 1.1rem !important; }
"""

HEAD = '<meta name="color-scheme" content="light dark">'

# runs in the browser when the presenter checkbox changes (also when a deep link sets it)
PRESENTER_JS = "(on) => { document.body.classList.toggle('presenter', !!on); return on; }"


def launch_options():
    """The keyword arguments of demo.launch() that style the page (Gradio 6 takes them there)."""
    return {"theme": THEME, "css": CSS, "head": HEAD}


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


PLOTLY_LIGHT = plotly_template(dark=False)
PLOTLY_DARK = plotly_template(dark=True)
