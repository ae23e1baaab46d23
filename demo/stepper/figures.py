"""Plotly figures of a recorded speculative run, one function per figure, all drawn from trace records.

    fig = memory_heatmaps(run.records[3], "accept", Look(dark=True))

Every figure gets an explicit template (demo.theme: light or dark; plotly ignores the page's mode),
Okabe-Ito colours for categories and a diverging blue-red scale centred at 0 for signed values, so
it reads for colour-blind viewers too; categories are also named in text, never by colour alone.
"""
import re
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly import colors
from plotly.colors import make_colorscale

from qwen.costs import Costs, break_even, from_records, predict, speedup_at
from demo.stepper import steps
from demo.i18n import t
from demo.theme import OKABE_ITO, plotly_template

# negative blue, zero white, positive red (ColorBrewer RdBu, reversed), spelled out: plotly.js's own "RdBu"
# has a grey middle, and these figures skip the checks that would translate the name
DIVERGING = make_colorscale(list(reversed(colors.diverging.RdBu)))
TEMPLATES = {dark: plotly_template(dark).to_plotly_json() for dark in (False, True)}
STATE_ORDER = ("before", "after_verify", "after")
SHOWN = {"prefill": ("after",), "guess": ("before",), "verify": ("before", "after_verify"),
         "accept": STATE_ORDER}
STATUS_COLOURS = {
    "untouched": "#BBBBBB", "written": OKABE_ITO["orange"], "snapshot_written": OKABE_ITO["sky_blue"],
    "steps_kept": OKABE_ITO["yellow"], "truncated": OKABE_ITO["vermillion"], "restored": OKABE_ITO["blue"],
    "selected": OKABE_ITO["bluish_green"], "kept": "#777777", "dirty": OKABE_ITO["reddish_purple"],
}
COST_COLOURS = {"draft": OKABE_ITO["orange"], "verify": OKABE_ITO["blue"], "snapshot": OKABE_ITO["sky_blue"],
                "restore": OKABE_ITO["vermillion"], "rerun": OKABE_ITO["reddish_purple"], "fused": OKABE_ITO["bluish_green"],
                "catch_up": OKABE_ITO["yellow"]}


@dataclass
class Look:
    lang: str = "English"
    dark: bool = False
    presenter: bool = False
    narrow: bool = False                # a phone-sized screen: heatmap panels one to a row

    @property
    def font(self):
        return 20 if self.presenter else 14

    @classmethod
    def from_client(cls, lang, client="", presenter=False):
        """From what the browser reports (ui.LOOK_JS, demo/static/look.js): "dark", "narrow", both or neither."""
        words = str(client or "").split()
        return cls(lang=lang, dark="dark" in words, presenter=bool(presenter), narrow="narrow" in words)


MARGIN = {"l": 60, "r": 70, "t": 96, "b": 40}
CLIP = 0.99             # the memory figure's colour scales end at this quantile of |value| over the run
FAINT = 0.05            # a memory panel whose largest |value| is under this share of its colour scale is said in words


def new_figure(data=(), layout=None):
    """A plotly figure from plain dicts, without plotly's per-property checks (they cost 20-100 ms a
    figure, most of a step's time); the dicts are written here, not taken from visitors."""
    return go.Figure({"data": list(data), "layout": layout or {}}, _validate=False)


CJK = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f"     # characters a line may break between


def _width(text):
    """Columns a piece of text takes: a CJK character counts as two Latin ones."""
    return sum(2 if re.match(f"[{CJK}]", c) else 1 for c in text)


def wrap_title(title, columns):
    """A title or note (plotly's <br>, <sub>, <span> markup) with a line break put at a space, or between
    two CJK characters, wherever a line would be wider than `columns` Latin characters (a CJK character
    counts as two, text in <sub> or <small> as 0.8 of one); tags open at a break are closed before it and
    opened again after it. None: unchanged."""
    if not columns:
        return title
    out, open_tags, used, space = [], [], 0.0, False
    for piece in re.split(r"(<[^>]+>)", title):
        if piece.startswith("<"):
            name = (piece.strip("</>").split() or [""])[0].lower()
            if name == "br":
                used, space = 0.0, False
            elif piece.startswith("</"):
                open_tags = open_tags[:-1]
            else:
                open_tags = open_tags + [(name, piece)]
            out.append(" " if space else "")
            out.append(piece)
            space = False
            continue
        small = 0.8 if any(n in ("sub", "small") for n, _ in open_tags) else 1.0
        for word in re.findall(f"\\s+|[{CJK}]|[^\\s{CJK}]+", piece):
            if word.isspace():
                space = True
                continue
            need = (_width(word) + space) * small
            if used > 0 and used + need > columns:
                out.append("".join(f"</{n}>" for n, _ in reversed(open_tags)) + "<br>" +
                           "".join(tag for _, tag in open_tags))
                used, need = 0.0, _width(word) * small
            elif space:
                out.append(" ")
            out.append(word)
            used, space = used + need, False
    return "".join(out) + (" " if space else "")


def title_columns(look, half=False):
    """How many Latin characters a line of a figure's title may hold: on a phone, in presenter mode's large
    type, or in a figure half the page wide, a long title gets more lines (None: no wrapping)."""
    if look.narrow:
        return 30
    if look.presenter:
        return 34 if half else 70
    return 44 if half else 80


TITLE_PAD = 12          # pixels above a figure's title


def title_margin(title, look, legend_rows=0, half=False):
    """Pixels above the plot area that hold a figure's title once wrapped (wrap_title, title_columns), from
    TITLE_PAD below the top (plotly draws a title at 1.4 times the figure's font, its lines 1.3 apart), and
    under it `legend_rows` rows of a legend placed just above the plot."""
    lines = wrap_title(title, title_columns(look, half)).count("<br>") + 1
    need = TITLE_PAD + lines * look.font * 1.4 * 1.3 + legend_rows * look.font * 1.5 + 12
    return max(MARGIN["t"], int(need))


def _legend_entries(data, layout):
    """How many entries a figure's legend lists (0: it shows none), from its traces and layout as dicts."""
    if layout.get("showlegend") is False:
        return 0
    return sum(1 for trace in data if trace.get("showlegend") is not False and trace.get("type") != "heatmap")


AXIS = re.compile(r"[xy]axis\d*$")


def framed(fig, look, title, height, *, fixed=False, half=False, room_for=None):
    """Template, title (wrapped to fit a phone or presenter screen, hung from the top), font and size.
    A legend the figure did not place goes just above the plot: in one row, right-aligned, or on a phone
    one entry a row, left-aligned; the margin above the plot holds the title and that legend.
    `fixed`: the figure placed its own axes and margins (no automargin, so it keeps its height from phase
    to phase) with title_margin(title, look) above them; `half`: the page shows it half as wide;
    `room_for`: a longer title whose lines the margin keeps room for (so the figure's height holds still).
    Works on the figure's plain dicts and builds it once more without plotly's per-property update
    machinery (that cost 20-30 ms a figure: most of a step's time on the server)."""
    data = [trace.to_plotly_json() for trace in fig.data]
    layout = fig.layout.to_plotly_json()
    rows = 0
    if (layout.get("legend") or {}).get("orientation") is None and _legend_entries(data, layout):
        rows = _legend_entries(data, layout) if look.narrow else 1
        layout["legend"] = {**layout.get("legend", {}), "orientation": "v" if look.narrow else "h",
                            "yanchor": "bottom", "y": 1.0, "xanchor": "left" if look.narrow else "right",
                            "x": 0.0 if look.narrow else 1.0}
    scale = 1 if fixed else (1.25 if look.presenter else 1)
    top = title_margin(room_for or title, look, rows, half)
    layout["template"] = TEMPLATES[look.dark]       # assigned, not merged into plotly's default (6 KB more a figure)
    # hung from the top: plotly places a title of several lines by its first line's baseline, a font size lower
    layout["title"] = {**layout.get("title", {}), "text": wrap_title(title, title_columns(look, half)), "x": 0.01,
                       "xanchor": "left", "y": 1.0, "yref": "container", "yanchor": "top",
                       "pad": {"t": TITLE_PAD + look.font}}
    layout["height"] = int(height * scale) + (0 if fixed else top - MARGIN["t"])
    layout["font"] = {**layout.get("font", {}), "size": look.font}
    layout["margin"] = {**layout.get("margin", {}), **MARGIN, "t": top, **({"l": 40, "r": 56} if look.narrow else {})}
    if not fixed:
        for name in {"xaxis", "yaxis", *filter(AXIS.match, layout)}:
            layout[name] = {**layout.get(name, {}), "automargin": True}
    for note in layout.get("annotations", ()):
        note.setdefault("font", {}).setdefault("size", look.font)
    return new_figure(data, layout)


def _symmetric(grids):
    """The largest |value| over several grids (never 0, so a colour scale stays defined)."""
    return max((_max_abs(g) for g in grids if g), default=0.0) or 1e-9


def _max_abs(grid):
    """The largest |value| of a grid (0.0 for an empty one)."""
    return max((abs(v) for row in grid for v in row), default=0.0)


def diverging(bound, **colorbar):
    """A colour axis from -bound (blue) through 0 (white) to bound (red), with these colour bar settings."""
    return {"colorscale": DIVERGING, "cmin": -bound, "cmax": bound, "cmid": 0, "colorbar": colorbar}


def subtract(a, b):
    """a − b for two grids of the same shape (lists of lists)."""
    return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


# --- the stack ------------------------------------------------------------------------------------------

def layer_map(record, phase, look=Look()):
    """One bar per layer (bottom: layer 0, top: the MTP head), length = bytes of its state at this phase,
    colour = what happened to it in this phase, said in words beside the bar: each row's label (left of
    the axis, at the page's text size) names the layer and, on a second line after a square of the bar's
    colour, its status. Nothing is written inside a bar, however short it is."""
    state = record["states"][steps.state_for_phase(phase)]
    status = steps.layer_status(record, phase)
    kv = iter(state["kv"])                        # an attention layer's row also says its KV length
    names = [f"L{la['index']} {t(la['kind'], look.lang)}" + (f" · KV {next(kv)}" if la["kind"] == "attention" else "")
             for la in state["layers"]] + [f"{t('mtp_head', look.lang)} · KV {state['head_kv']}"]
    sizes = [la["bytes"] for la in state["layers"]] + [steps.head_bytes(state)]
    labels = [f"{name}<br><span style='color:{STATUS_COLOURS[key]}'>■</span> {t(f'status_{key}', look.lang)}"
              for name, key in zip(names, status)]
    fig = new_figure()
    for key in steps.STATUSES:                    # one trace per status: hover and tests name them
        rows = [i for i, s in enumerate(status) if s == key]
        if not rows:
            continue
        label = t(f"status_{key}", look.lang)
        fig.add_bar(y=[names[i] for i in rows], x=[sizes[i] / 1024 for i in rows], orientation="h",
                    name=label, marker_color=STATUS_COLOURS[key],
                    hovertemplate="%{y}: %{x:.1f} KB — " + label + "<extra></extra>")
    fig.update_yaxes(categoryorder="array", categoryarray=names, tickvals=names, ticktext=labels, title=None,
                     tickfont={"size": look.font})
    fig.update_xaxes(title=t("bytes", look.lang).replace("bytes", "KB").replace("字节", "KB"))
    fig.update_layout(barmode="stack", bargap=0.3, showlegend=False)
    return framed(fig, look, t("fig_layers", look.lang), 120 + 48 * len(names))


# --- the recurrent memory and the conv window -----------------------------------------------------------


def quantile(values, q=CLIP):
    """The q-quantile of a list of numbers, linearly interpolated between the two nearest ranks (numpy's
    default), or 0.0 for an empty list."""
    values = sorted(values)
    if not values:
        return 0.0
    at = q * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def clipped_scale(grids, q=CLIP):
    """One symmetric colour scale for many grids: the q-quantile of their |value| (never 0)."""
    return quantile([abs(v) for g in grids for row in g for v in row], q) or 1e-9


def run_scales(records, q=CLIP):
    """One colour scale per run, symmetric, for each kind of heatmap: the memory S (the q-quantile of |S|
    over every recorded memory of the run), the differences (the q-quantile of |Δ| over the nonzero cells
    of what verify wrote and what the rollback took back, every round) and the conv window (its largest
    |value|). Clipping at a quantile keeps one outlier column from washing out every other cell. -> {"memory",
    "diff", "conv"}"""
    memories, changes, convs = [], [], []
    for rec in records:
        convs += [st["conv"] for st in rec["states"].values() if st and st.get("conv")]
        grids = {name: st["memory"] for name, st in rec["states"].items() if st and st.get("memory")}
        memories += grids.values()
        for a, b in (("after_verify", "before"), ("after_verify", "after")):
            if a in grids and b in grids:
                changes += [abs(x - y) for ra, rb in zip(grids[a], grids[b]) for x, y in zip(ra, rb) if x != y]
    return {"memory": clipped_scale(memories, q), "diff": quantile(changes, q) or 1e-9, "conv": _symmetric(convs)}


def memory_panels(record, phase, lang="English", mode=None):
    """What the memory figure shows for a round and phase, per rollback mode: the states in the first
    row, their differences in the second. -> (states, diffs), each [(name, title, grid or None)];
    None: not reached yet at this phase (drawn as an empty panel, so nothing moves between phases).

    recompute: ① snapshot (= the state before verify) ② after verify, polluted by the rejected drafts
               ③ restored from the snapshot (the same values: restore copies them back) ④ after re-running
               the accepted tokens; differences ② − ①, ③ − ① (zero), ② − ④ (what the rejected drafts wrote)
    select:    ① before ② the memory through every kept write (verify wrote none) ③ after the accepted
               tokens' writes were applied; ② − ①, ③ − ①, ② − ③ (the rejected drafts' writes, never applied)
    none:      ① before ② after verify ③ after, left dirty; ② − ①, ③ − ①, ② − ③ (nothing removed)
    The prefill shows its one state in the grid of the run's `mode`, so the figure keeps its size."""
    states = record["states"]
    if record.get("kind") == "prefill" or phase == "prefill":
        empty = [(f"empty{i}", "", None) for i in range(4 if mode == "recompute" else 3)]
        return [("after", t("mem_prefill", lang), states["after"]["memory"])] + empty[1:], empty[:3]
    shown = SHOWN[phase]
    grid = lambda name: states[name]["memory"] if name in shown else None       # noqa: E731
    mode, back = record["rollback"], record["rolled_back"]
    k, n = record["k"], record["accepted"]
    before, verify, after = grid("before"), grid("after_verify"), grid("after")
    writes = mode == "select"            # select's verify wrote no memory: ② is the memory through its kept writes
    polluted = t("mem_polluted_writes" if writes else "mem_polluted", lang, r=k - n) if back and phase == "accept" \
        else t("mem_verify_writes" if writes else "mem_verify", lang)

    def diff(a, b):
        return subtract(a, b) if a is not None and b is not None else None
    last = "④" if mode == "recompute" else "③"                     # the panel of the memory the round kept
    removed = t("diff_not_removed", lang) if mode == "none" else \
        t(("diff_removed_writes" if writes else "diff_removed") if back else "diff_none_rejected", lang, last=last)
    wrote = ("diff_verify", t("diff_verify_writes" if writes else "diff_verify", lang), diff(verify, before))
    taken = ("diff_removed", removed, diff(verify, after))
    if mode == "recompute":
        restored = before if after is not None else None           # restore copies the snapshot back, bit for bit
        rows = [("before", t("mem_snapshot", lang), before), ("after_verify", polluted, verify),
                ("restored", t("mem_restored" if back else "mem_no_restore", lang), restored if back else None),
                ("after", t("mem_rerun", lang, n=n + 1) if back else t("mem_kept", lang, i=last), after)]
        restore_diff = diff(restored, before) if back else None
        restore_title = t("diff_restore", lang) if not restore_diff or not _max_abs(restore_diff) else \
            t("diff_restore_differs", lang, d=_max_abs(restore_diff))
        return rows, [wrote, ("diff_restore", restore_title, restore_diff), taken]
    third = {"select": t("mem_selected", lang, n=n + 1, m=k + 1),
             "none": t("mem_dirty", lang) if back else t("mem_kept", lang, i=last)}[mode]
    rows = [("before", t("mem_before", lang), before), ("after_verify", polluted, verify), ("after", third, after)]
    return rows, [wrote, ("diff_after", t("diff_kept", lang), diff(after, before)), taken]


def _grid_layout(rows, cols, height, panel_px, *, title_px=52, axis_px=40, top=MARGIN["t"]):
    """Axis domains of a grid of heatmap panels, placed in pixels so titles never reach the row above
    (no make_subplots: its checks cost ~100 ms a figure); top: the figure's margin above them.
    -> (layout axes dict, [(xname, yname)])"""
    axes, refs = {}, []
    plot_h = height - top - MARGIN["b"]
    gap = 0.06 if cols > 2 else 0.1
    width = (1 - gap * (cols - 1)) / cols
    y_top = plot_h
    for r, count in enumerate(rows):
        y_top -= title_px
        y0, y1 = (y_top - panel_px) / plot_h, y_top / plot_h
        for c in range(count):
            i = len(refs) + 1
            x0 = c * (width + gap)
            axes[f"xaxis{i if i > 1 else ''}"] = {"domain": [x0, x0 + width], "anchor": f"y{i if i > 1 else ''}"}
            axes[f"yaxis{i if i > 1 else ''}"] = {"domain": [max(0, y0), y1], "anchor": f"x{i if i > 1 else ''}"}
            refs.append((f"x{i if i > 1 else ''}", f"y{i if i > 1 else ''}"))
        y_top -= panel_px + axis_px
    return axes, refs


def _wrap_rows(panels, cols):
    """Panels laid out `cols` to a row: [[p1, p2], [p3]] (narrow screens get one column)."""
    return [panels[i:i + cols] for i in range(0, len(panels), cols)]


def panel_grid(groups, cols, top, panel_px, title_px, axis_px):
    """Rows of panels (`groups`: a list per row) under a `top` margin: their axes (_grid_layout) and the
    figure's height. -> (axes, [(xref, yref)], height)"""
    height = top + MARGIN["b"] + len(groups) * (title_px + panel_px + axis_px)
    axes, refs = _grid_layout([len(g) for g in groups], cols, height, panel_px, title_px=title_px, axis_px=axis_px,
                              top=top)
    return axes, refs, height


BARE = {"showgrid": False, "zeroline": False}     # a panel's axes: no grid lines, no zero line


def heatmap_panel(name, z, ref, visible, hovertemplate, coloraxis="coloraxis"):
    """One heatmap of a grid of panels, on the axes `ref` (xref, yref), coloured by a shared colour axis."""
    return {"type": "heatmap", "z": z, "coloraxis": coloraxis, "name": name, "xaxis": ref[0], "yaxis": ref[1],
            "visible": visible, "hovertemplate": hovertemplate}


def panel_title(text, axes, ref, font, yshift=4):
    """The words over a panel (an annotation named "panel-title"), centred over its axes' domain."""
    x_domain, y_domain = axes[axis_key("x", ref[0])]["domain"], axes[axis_key("y", ref[1])]["domain"]
    return {"text": text, "showarrow": False, "xref": "paper", "yref": "paper", "x": sum(x_domain) / 2,
            "y": y_domain[1], "yanchor": "bottom", "yshift": yshift, "xanchor": "center", "name": "panel-title",
            "font": font}


def panel_note(text, ref, **more):
    """Words in the middle of a panel (on the axes `ref`): why it shows nothing."""
    return {"text": text, "showarrow": False, "xref": f"{ref[0]} domain", "yref": f"{ref[1]} domain",
            "x": 0.5, "y": 0.5, **more}


def faint_words(name, grid, top, lang="English"):
    """The words shown instead of a memory panel whose largest |value| is under FAINT of its colour scale
    `top` (the panel would look blank), saying why; None: the panel is drawn. name: the panel's (a state,
    or "diff_..." for a difference)."""
    peak = _max_abs(grid)
    if peak >= FAINT * top:
        return None
    if peak == 0:
        return t("panel_zero", lang)
    return t("panel_faint_change" if name.startswith("diff_") else "panel_faint_memory", lang, p=round(FAINT * 100))


def memory_heatmaps(record, phase, look=Look(), scales=None, mode=None):
    """The watched DeltaNet layer/head memory at this phase (memory_panels): states in one colour scale,
    differences in another, both fixed for the whole run when `scales` (run_scales(records)) is given. A
    panel that would look blank says so in words instead (faint_words). Cells where the rejected drafts
    wrote the most are marked × on the polluted memory. mode: the run's rollback (the prefill record does
    not say it)."""
    states = record["states"]
    watch = (states.get("after") or states["before"])["watch"]
    rows, diffs = memory_panels(record, phase, look.lang, mode or record.get("rollback"))
    s_top, d_top = (scales["memory"], scales["diff"]) if scales else \
        (_symmetric([g for _, _, g in rows]), _symmetric([g for _, _, g in diffs]))
    title = t("fig_memory", look.lang, layer=watch["layer"], head=watch["head"]) + \
        f"<br><sub>{t('fig_memory_sub', look.lang)}</sub>"
    cols = 1 if look.narrow else max(3, len(rows))
    groups = _wrap_rows(rows, cols) + _wrap_rows(diffs, cols)
    panel_px = 130 if look.narrow else (190 if cols > 3 else 230)
    axes, refs, height = panel_grid(groups, cols, title_margin(title, look), panel_px,
                                    *((60, 44) if not look.presenter else (78, 54)))
    data, notes, said = [], [], set()
    panels = [p + ("coloraxis", s_top) for p in rows] + [p + ("coloraxis2", d_top) for p in diffs]
    axis_title = lambda key: {"text": t(key, look.lang), "standoff": 2, "font": {"size": look.font - 3}}  # noqa: E731
    for (name, title_of, grid, scale, scale_top), ref in zip(panels, refs):
        words = None if grid is None else faint_words(name, grid, scale_top, look.lang)
        drawn = grid is not None and words is None
        z = grid if grid is not None else [[0.0]]
        if grid is not None and scale == "coloraxis2" and name != "diff_restore":
            title_of += f"<br><span style='font-size:0.85em'>{t('max_change', look.lang, d=_max_abs(grid))}</span>"
        data.append(heatmap_panel(name, z, ref, drawn, f"{t('key_dim', look.lang)} %{{y}}, "
                                  f"{t('value_dim', look.lang)} %{{x}}: %{{z:.4f}}<extra>{name}</extra>", scale))
        axes[axis_key("x", ref[0])].update(showticklabels=drawn, tickvals=[0, len(z[0]) - 1],
                                            title=axis_title("value_dim"), **BARE)
        axes[axis_key("y", ref[1])].update(showticklabels=drawn, tickvals=[0, len(z) - 1], autorange="reversed",
                                            title=axis_title("key_dim"), **BARE)
        notes.append(panel_title(title_of, axes, ref, {"size": look.font - 1}))
        if grid is None:
            notes.append(panel_note(t("not_needed" if phase == "accept" else "not_yet", look.lang), ref, opacity=0.6))
        elif words:
            said.add(name)
            notes.append(panel_note(wrap_title(words, 24 if look.narrow else 34), ref, name=f"panel-empty {name}",
                                    font={"size": look.font - 2}))
    marks = None if "after_verify" in said else _rejected_marks(record, phase, rows)
    if marks:
        xref, yref = refs[[p[0] for p in rows].index("after_verify")]
        data.append({"type": "scatter", "x": marks[1], "y": marks[0], "mode": "markers", "xaxis": xref,
                     "yaxis": yref, "name": "rejected", "hoverinfo": "skip", "showlegend": False,
                     "marker": {"symbol": "x-thin", "size": 9, "line": {"width": 2, "color": "#000000"}}})
    bar = lambda name, top, y: diverging(top, thickness=12, len=0.4, x=1.01, y=y, title={  # noqa: E731
        "text": _bar_title(name, top, scales, look), "side": "top", "font": {"size": look.font - 3}})
    layout = {**axes, "annotations": notes, "coloraxis": bar("S", s_top, 0.78), "coloraxis2": bar("Δ", d_top, 0.22)}
    return framed(new_figure(data, layout), look, title, height, fixed=True)


def _bar_title(name, top, scales, look):
    """A colour bar's title: what it colours, and with the run's scale, where it is clipped."""
    if not scales:
        return name
    return f"{name}<br>{t('clipped', look.lang, q=round(CLIP * 100), x=top)}"


def axis_key(letter, ref):
    """"x3" -> "xaxis3", "y" -> "yaxis"."""
    return f"{letter}axis{ref[1:]}"


def _rejected_marks(record, phase, rows, top=12):
    """Cells (rows, cols) of the watched memory where the rejected drafts wrote the most (after verify −
    after, the largest |Δ| cells above half the largest), at the accept phase of a rolled-back round."""
    names = [p[0] for p in rows]
    if phase != "accept" or not record.get("rolled_back") or record.get("rollback") == "none" \
            or "after_verify" not in names:
        return None
    delta = subtract(record["states"]["after_verify"]["memory"], record["states"]["after"]["memory"])
    cells = sorted(((abs(v), i, j) for i, row in enumerate(delta) for j, v in enumerate(row)), reverse=True)
    if not cells or cells[0][0] == 0:
        return None
    keep = [(i, j) for v, i, j in cells[:top] if v >= 0.5 * cells[0][0]]
    return [i for i, _ in keep], [j for _, j in keep]


def conv_labels(run, record, which, columns, chars=10):
    """Tick labels of the conv window's columns: position and token (its first `chars` characters, … when
    cut) of the last K-1 tokens run, a ✗ on a column that holds a rejected guess."""
    labels = []
    for pos in steps.conv_positions(record, which, columns):
        tok = steps.token_at(run, pos, record, which)
        if tok is None:
            labels.append("∅")
            continue
        dirty = which == "after_verify" or (which == "after" and record.get("rollback") == "none")
        rejected = record.get("kind") == "round" and dirty and record["pos"] + record["accepted"] < pos
        text = steps.token_text(run, tok, chars)
        labels.append(f"{'✗ ' if rejected else ''}{pos}<br>{text}")
    return labels


def conv_strip(record, phase, labels=None, look=Look(), scale=None):
    """The conv window (channels, averaged, x K-1 columns; the right column is the newest token) before
    verify, after verify and after: it shifts by a column per token and snaps back on a rejection.
    labels: {state: [column tick labels]} (see conv_labels); scale: one colour scale for the whole run."""
    states = record["states"]
    shown = SHOWN[phase]
    any_state = states.get("after") or states["before"]
    columns = len(any_state["conv"][0])
    after_key = {"select": "after_rollback", "recompute": "after_rollback", "none": "after_none"}.get(
        record.get("rollback"), "after_rollback") if record.get("rolled_back") else "after_accept"
    titles = [t(s if s != "after" else after_key, look.lang) for s in STATE_ORDER]
    grids = {s: states[s]["conv"] for s in STATE_ORDER if s in shown}
    cols = 1 if look.narrow else 3
    groups = _wrap_rows(list(STATE_ORDER), cols)
    title = t("fig_conv", look.lang, layer=any_state["watch"]["layer"], n=columns)
    axes, refs, height = panel_grid(groups, cols, title_margin(title, look),
                                    *((120, 40, 56) if not look.presenter else (140, 52, 70)))
    data, notes = [], []
    for s, title_of, ref in zip(STATE_ORDER, titles, refs):
        z = grids.get(s)
        data.append(heatmap_panel(s, z or [[0.0] * columns], ref, z is not None,
                                  "%{y}, %{x}: %{z:.3f}<extra></extra>"))
        ticks = (labels or {}).get(s) or [str(c) for c in range(columns)]
        axes[axis_key("x", ref[0])].update(tickvals=list(range(columns)), ticktext=ticks, tickangle=0,
                                            showticklabels=z is not None, tickfont={"size": look.font - 3}, **BARE)
        axes[axis_key("y", ref[1])].update(showticklabels=False, **BARE)
        notes.append(panel_title(title_of, axes, ref, {"size": look.font - 1}))
        if z is None:
            notes.append(panel_note(t("not_yet", look.lang), ref, opacity=0.6))
    layout = {**axes, "annotations": notes,
              "coloraxis": diverging(scale or _symmetric(grids.values()), thickness=12, x=1.01)}
    return framed(new_figure(data, layout), look, title, height, fixed=True)


def memory_change(record, phase, look=Look()):
    """‖ΔS‖ per DeltaNet layer in this round (all its value heads): what verify wrote (after verify −
    before) and what the rollback took back (after verify − after: the rejected drafts' writes), the
    watched layer marked ▶. Shown as the phase reaches them; a trace without these norms gets a dash.
    These are sizes of changes, which do not add up: where more was taken back than written, a sentence
    under the title names the layers and says why."""
    states = record["states"]
    any_state = states.get("after") or states["before"]
    deltanet = [la["index"] for la in any_state["layers"] if la["kind"] == "deltanet"]
    watched = any_state.get("watch", {}).get("layer")
    names = [f"{'▶ ' if i == watched else ''}L{i}" for i in deltanet]
    fig = new_figure()
    writes = "_writes" if record.get("rollback") == "select" else ""    # select: writes kept aside, not taken back
    series = (("after_verify", "change_verify" + writes, OKABE_ITO["orange"]),
              ("after", "change_removed" + writes, OKABE_ITO["blue"]))
    shown = SHOWN.get(phase, ()) if record.get("kind") == "round" else ()
    changes = {}
    for state, key, colour in series:
        change = (states.get(state) or {}).get("change")
        if change is None or len(change) != len(names):
            continue
        changes[state] = change
        fig.add_bar(x=names, y=change, name=t(key, look.lang), marker_color=colour,
                    visible=True if state in shown else "legendonly",
                    hovertemplate="%{x}: ‖ΔS‖ = %{y:.3g}<extra></extra>")
    if not changes:
        fig.add_annotation(text="—" if record.get("kind") == "round" else t("not_yet", look.lang), showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_yaxes(title=t("change_norm", look.lang), rangemode="tozero")
    fig.update_layout(barmode="group", legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left",
                                               "x": 0.0})
    title = t("fig_change", look.lang)
    more = [f"L{i}" for i, written, back in zip(deltanet, changes.get("after_verify", ()), changes.get("after", ()))
            if back > written] if "after" in shown else []
    note = lambda layers: f"<br><sub>{t('change_more_back', look.lang, layers=', '.join(layers))}</sub>"  # noqa: E731
    longest = title + note([f"L{i}" for i in deltanet])        # room for it in every phase: no jump at accept
    return framed(fig, look, title + (note(more) if more else ""), 330, half=True, room_for=longest)


# --- KV caches -------------------------------------------------------------------------------------------

def kv_lengths(record, phase, look=Look()):
    """Positions held by each attention layer's KV cache and by the MTP head's, before / after verify /
    after: they grow by k+1 in verify and are cut back by position on a rejection."""
    states = record["states"]
    any_state = states.get("after") or states["before"]
    names = [f"L{la['index']}" for la in any_state["layers"] if la["kind"] == "attention"] + \
        [t("mtp_head", look.lang)]
    fig = new_figure()
    colours = {"before": "#999999", "after_verify": OKABE_ITO["orange"], "after": OKABE_ITO["blue"]}
    for s in STATE_ORDER:
        if s not in states:
            continue
        lengths = states[s]["kv"] + [states[s]["head_kv"]]
        label = t(s if s != "after" or record.get("rolled_back") else "after_accept", look.lang)
        fig.add_bar(x=names, y=lengths, name=label, marker_color=colours[s], text=lengths,
                    textposition="outside", cliponaxis=False, visible=True if s in SHOWN[phase] else "legendonly")
    lengths = [n for s in states for n in states[s]["kv"] + [states[s]["head_kv"]]]
    low, high = min(lengths), max(lengths)
    bottom = max(0, low - 6)
    fig.update_yaxes(title=t("positions", look.lang), range=[bottom, high + 0.2 * (high - bottom) + 1])
    fig.update_layout(barmode="group")
    return framed(fig, look, t("fig_kv", look.lang), 330, half=True)


# --- the whole run ---------------------------------------------------------------------------------------

def _rounds(records):
    return [r for r in records if r.get("kind") == "round"]


def _mark_round(fig, current):
    if current:
        fig.add_vrect(x0=current - 0.5, x1=current + 0.5, fillcolor="#999999", opacity=0.25, line_width=0)


def cost_segments(rollback):
    """The cost chart's segments for a rollback mode: [(key in a record's seconds, i18n key of its name)],
    each named after the work its time covers in that mode (select restores nothing: its "restore" time
    is the accept decision and the pick of a kept slot)."""
    if rollback == "select":
        segments = [("draft", "cost_draft"), ("snapshot", "cost_select_snapshot"), ("verify", "cost_verify"),
                    ("restore", "cost_select_restore")]
    elif rollback == "recompute":
        segments = [("draft", "cost_draft"), ("snapshot", "cost_snapshot"), ("verify", "cost_verify"),
                    ("restore", "cost_recompute_restore"), ("rerun", "cost_rerun")]
    else:
        segments = [("draft", "cost_draft"), ("verify", "cost_verify"), ("restore", "cost_none_restore")]
    return segments + [("catch_up", "cost_catch_up")]


def raced(rounds):
    """The key of the round records' seconds the cost views read: "race_seconds" where every round has its time as
    the race runs it (recording.as_raced), else the recording's own per-phase "seconds"."""
    return "race_seconds" if rounds and all("race_seconds" in r for r in rounds) else "seconds"


def cost_stack(run, current=None, look=Look()):
    """Per round, stacked milliseconds, one segment per kind of work done in the run's rollback mode: each round
    as the race runs it where the recording timed that (a `select` round run as one call is one segment), else the
    instrumented recording's own times (copies of the watched states for the views included), as the subtitle
    says; where the mean round differs from the round cost the race's measurement gives (run.costs) by more than
    20%, a sentence says by how much and why."""
    records = run.records
    rounds = _rounds(records)
    key = raced(rounds)
    x = [r["round"] for r in rounds]
    fig = new_figure()
    for phase, name in cost_segments(run.settings.rollback) + [("fused", "cost_fused")]:
        ys = [r[key].get(phase, 0.0) * 1000 for r in rounds]
        if (phase in ("fused", "catch_up") or key == "race_seconds") and not any(ys):   # work this path never did
                                                                  # (recordings from before catch_up was timed apart)
            continue
        fig.add_bar(x=x, y=ys, name=t(name, look.lang), marker_color=COST_COLOURS[phase])
    _mark_round(fig, current)
    prefill = records[0]["seconds"].get("prefill", 0.0) * 1000 if records else 0.0
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    fig.update_xaxes(title=t("round", look.lang))
    fig.update_yaxes(title=t("ms", look.lang))
    title = f"{t('fig_cost', look.lang)} <sub>{t('prefill_ms', look.lang, ms=prefill)}</sub>" \
        f"<br><sub>{t('cost_raced' if key == 'race_seconds' else 'cost_recording', look.lang)}</sub>"
    # a legend even for one segment (plotly hides a lone trace's): it says what the bars are; below the plot, clear of
    # the axis title, except on a phone, where framed puts it above (one entry a row: below, it covered "round")
    fig.update_layout(showlegend=True)
    if not look.narrow:
        fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.42, "xanchor": "left", "x": 0.0})
    return framed(fig, look, title, 420, half=True)


def recording_vs_race(run, lang="English"):
    """One sentence when the recorded mean round (as the race runs it, where timed so) and the race's measured
    round cost differ by more than 20% (else ""): how much, and why."""
    race = run_costs(run)
    rounds = _rounds(run.records)
    if race is None or not run.costs or not rounds:
        return ""
    key = raced(rounds)
    recorded = sum(sum(r[key].values()) for r in rounds) / len(rounds)
    predicted = race.passes(run_yield(run.records)[1])          # the recording times the passes alone
    if predicted <= 0 or abs(recorded / predicted - 1) <= 0.2:
        return ""
    words = "cost_raced_differs" if key == "race_seconds" else "cost_faster" if recorded < predicted else \
        "cost_slower_whole" if race.whole else "cost_slower"
    return t(words, lang, rec=recorded * 1000, race=predicted * 1000, x=recorded / predicted)


def acceptance_over_run(records, current=None, look=Look()):
    """Per round, how many guesses were accepted (bars), and the acceptance rate so far (line)."""
    rounds = _rounds(records)
    x = [r["round"] for r in rounds]
    fig = new_figure()
    fig.add_bar(x=x, y=[r["accepted"] for r in rounds], name=t("accepted_per_round", look.lang),
                marker_color=OKABE_ITO["sky_blue"])
    rate = [steps.acceptance(rounds[:i + 1])[0] for i in range(len(rounds))]
    fig.add_scatter(x=x, y=rate, name=t("acceptance_rate", look.lang), mode="lines", yaxis="y2",
                    line={"color": OKABE_ITO["vermillion"], "width": 3})
    _mark_round(fig, current)
    k = max([r["k"] for r in rounds] + [1])            # k="auto": the longest round's
    fig.update_layout(yaxis={"range": [0, k * 1.1], "dtick": 1, "title": {"text": t("accepted_per_round", look.lang)}},
                      yaxis2={"range": [0, 1.1], "tickformat": ".0%", "overlaying": "y", "side": "right",
                              "showgrid": False},
                      xaxis={"title": {"text": t("round", look.lang)}})
    return framed(fig, look, t("fig_acceptance", look.lang), 330, half=True)


def run_yield(records):
    """This run's tokens per round and share of rounds that rolled back, counted as the race counts them
    (demo.race: new tokens after the prefill's ÷ rounds; rounds that emitted a correction)."""
    rounds = _rounds(records)
    if not rounds:
        return 0.0, 0.0
    tokens = sum(len(r["emitted"]) for r in rounds)
    back = sum(any(e["origin"] == "correction" for e in r["emitted"]) for r in rounds)
    return tokens / len(rounds), back / len(rounds)


def run_costs(run):
    """The costs the what-if uses, a qwen.costs.Costs: the race's measurement of this host (run.costs,
    taken right after the recording, the way the race takes it), or for a trace without one, the
    recording's own times (qwen.costs.from_records), which are slower than the race's path."""
    if run.costs:
        return Costs(**run.costs)
    rounds = _rounds(run.records)
    if not rounds:
        return None
    step, _ = plain_step(run.records, run.plain_step_seconds)
    return from_records(run.records, rounds[0]["k"], run.settings.rollback, step)


def plain_step(records, plain_step_seconds=None):
    """-> (seconds of one plain step, whether it was measured); the median verify time is the fallback."""
    if plain_step_seconds and plain_step_seconds > 0:
        return plain_step_seconds, True
    verify = sorted(r["seconds"].get("verify", 0.0) for r in _rounds(records))
    return (verify[len(verify) // 2] if verify else 0.0) or 1e-3, False


def this_run_speedup(run):
    """The speed-up the what-if's "this run" marker shows: the race's prediction for a lane of this run's
    tokens, rounds and rolled-back share (qwen.costs.predict, prompt passes included). None: no rounds."""
    costs = run_costs(run)
    rounds = _rounds(run.records)
    if costs is None or not rounds:
        return None
    per_round, back = run_yield(run.records)
    return predict(costs, per_round, back, tokens=1 + round(per_round * len(rounds)), rounds=len(rounds))


def what_if(run, look=Look()):
    """Speed-up against the acceptance rate a (0..1) for this run's k, from the race's cost model and its
    measurement of this host (run_costs), with the break-even point and this run marked at its measured
    acceptance, at the speed-up the race predicts for its tokens per round."""
    records = run.records
    rounds = _rounds(records)
    fig = new_figure()
    costs = run_costs(run)
    if not rounds or costs is None:                      # a one-token run: nothing was speculated
        fig.add_annotation(text="—", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        return framed(fig, look, t("fig_whatif", look.lang), 380)
    k = rounds[0]["k"]
    tokens = 1 + sum(len(r["emitted"]) for r in rounds)               # a run of this length, as the race predicts
    xs = [i / 100 for i in range(101)]
    fig.add_scatter(x=xs, y=[speedup_at(a, k, costs, tokens) for a in xs], mode="lines", name=f"k = {k}",
                    line={"color": OKABE_ITO["blue"], "width": 3})
    fig.add_hline(y=1.0, line_dash="dot", line_color="#999999")
    even = break_even(k, costs, tokens=tokens)
    if even is not None:
        fig.add_vline(x=even, line_dash="dash", line_color=OKABE_ITO["vermillion"],
                      annotation_text=t("break_even", look.lang, a=even), annotation_position="top left")
    a, hits, n = steps.acceptance(records)
    if n:
        s = this_run_speedup(run)
        fig.add_scatter(x=[a], y=[s], mode="markers", name=t("this_run", look.lang, a=a, s=s),
                        marker={"size": 14, "color": OKABE_ITO["orange"], "symbol": "diamond",
                                "line": {"width": 1, "color": "#000"}})
    fig.update_xaxes(title=t("rate_a", look.lang), range=[0, 1])
    fig.update_yaxes(title=t("axis_speedup", look.lang), rangemode="tozero")
    fig.update_layout(legend={"yanchor": "bottom", "y": 0.02, "xanchor": "right", "x": 0.99, "orientation": "v"})
    title = f"{t('fig_whatif', look.lang)}<br><sub>{t('whatif_sub_race' if run.costs else 'whatif_sub_recording', look.lang)}</sub>"
    if even is None:
        fig.add_annotation(text=t("no_break_even", look.lang), showarrow=False, xref="paper", yref="paper",
                           x=0.02, y=0.95, xanchor="left")
    return framed(fig, look, title, 380)


def costs_line(run, lang="English"):
    """The costs the what-if predicts from, in plain steps, and where they come from (one sentence)."""
    costs = run_costs(run)
    if costs is None:
        return ""
    per_round, back = run_yield(run.records)
    r = costs.ratios(back, per_round)
    key = ("whatif_costs_race" if run.costs else "whatif_costs_recording") + ("_whole" if costs.whole else "")
    return t(key, lang, verify=r["verify"], draft=r["draft"], round=r["round"], around=r["around"],
             ms=costs.step * 1000, tok=costs.plain_token() * 1000)


def whatif_caption(run, lang="English"):
    """Under the what-if: what its curve is, in words, the costs it uses, and where the recording's own round
    times (the cost chart) differ from them by more than 20%, one sentence saying why."""
    costs = run_costs(run)
    if costs is None:
        return ""
    key = "whatif_caption_whole" if costs.whole else "whatif_caption"
    how = t("whatif_from_race" if run.costs else "whatif_from_recording", lang)
    parts = [t(key, lang, plain=costs.plain_token() * 1000, how=how), costs_line(run, lang),
             recording_vs_race(run, lang)]
    return "\n\n".join(p for p in parts if p)


def drift(proof_drift, first_diff_round=None, look=Look()):
    """Per round of the restore-skipped run: how far its watched memory is from the correct run's."""
    x = list(range(1, len(proof_drift) + 1))
    fig = new_figure()
    fig.add_scatter(x=x, y=proof_drift, mode="lines+markers", name=t("max_abs_diff", look.lang),
                    line={"color": OKABE_ITO["reddish_purple"], "width": 3}, connectgaps=False)
    if first_diff_round:
        fig.add_vline(x=first_diff_round, line_dash="dash", line_color=OKABE_ITO["vermillion"])
    fig.update_xaxes(title=t("round", look.lang))
    fig.update_yaxes(title=t("max_abs_diff", look.lang))
    return framed(fig, look, t("fig_drift", look.lang), 300)
