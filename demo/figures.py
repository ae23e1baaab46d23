"""Plotly figures of a recorded speculative run, one function per figure, all drawn from trace records.

    fig = memory_heatmaps(run.records[3], "accept", Look(dark=True))

Every figure gets an explicit template (demo.theme: light or dark; plotly ignores the page's mode),
Okabe-Ito colours for categories and a diverging blue-red scale centred at 0 for signed values, so
it reads for colour-blind viewers too; categories are also named in text, never by colour alone.
"""
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from demo import stepper
from demo.i18n import t
from demo.theme import OKABE_ITO, plotly_template

DIVERGING = "RdBu_r"                  # negative blue, zero white, positive red
STATE_ORDER = ("before", "after_verify", "after")
SHOWN = {"prefill": ("after",), "guess": ("before",), "verify": ("before", "after_verify"),
         "accept": STATE_ORDER}
DIFFS = (("diff_verify", "after_verify", "before"), ("diff_after", "after", "before"),
         ("diff_removed", "after_verify", "after"))
STATUS_COLOURS = {
    "untouched": "#BBBBBB", "written": OKABE_ITO["orange"], "snapshot_written": OKABE_ITO["sky_blue"],
    "steps_kept": OKABE_ITO["yellow"], "truncated": OKABE_ITO["vermillion"], "restored": OKABE_ITO["blue"],
    "selected": OKABE_ITO["bluish_green"], "kept": "#777777", "dirty": OKABE_ITO["reddish_purple"],
}
COST_COLOURS = {"draft": OKABE_ITO["orange"], "verify": OKABE_ITO["blue"], "snapshot": OKABE_ITO["sky_blue"],
                "restore": OKABE_ITO["vermillion"], "rerun": OKABE_ITO["reddish_purple"]}


@dataclass
class Look:
    lang: str = "English"
    dark: bool = False
    presenter: bool = False

    @property
    def font(self):
        return 20 if self.presenter else 14


def _frame(fig, look, title, height):
    if fig.layout.legend.orientation is None:          # default: one row above the plot, right-aligned
        fig.update_layout(legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0})
    fig.update_layout(template=plotly_template(look.dark), title={"text": title, "x": 0.01},
                      height=int(height * (1.25 if look.presenter else 1)), font={"size": look.font},
                      margin={"l": 60, "r": 30, "t": 90, "b": 50})
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    fig.update_annotations(font_size=look.font)
    return fig


def _symmetric(grids):
    """The largest |value| over several grids (never 0, so a colour scale stays defined)."""
    top = max((abs(v) for g in grids if g for row in g for v in row), default=0.0)
    return top or 1e-9


def _axis(letter, n):
    """Plotly's name for subplot n's axis domain: "x domain", "x2 domain", ..."""
    return f"{letter}{n if n > 1 else ''} domain"


def subtract(a, b):
    """a − b for two grids of the same shape (lists of lists)."""
    return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


# --- the stack ------------------------------------------------------------------------------------------

def layer_map(record, phase, look=Look()):
    """One bar per layer (bottom: layer 0, top: the MTP head), length = bytes of its state at this phase,
    colour and text = what happened to it in this phase."""
    state = record["states"][stepper.state_for_phase(phase)]
    status = stepper.layer_status(record, phase)
    names, sizes, kinds = [], [], []
    kv = iter(state["kv"])
    for layer in state["layers"]:
        kind = layer["kind"]
        extra = f" · KV {next(kv)}" if kind == "attention" else ""
        names.append(f"L{layer['index']} {t(kind, look.lang)}{extra}")
        sizes.append(layer["bytes"])
        kinds.append(kind)
    names.append(f"{t('mtp_head', look.lang)} · KV {state['head_kv']}")
    sizes.append(stepper.head_bytes(state))
    fig = go.Figure()
    for key in stepper.STATUSES:                    # one trace per status: the legend names them
        rows = [i for i, s in enumerate(status) if s == key]
        if not rows:
            continue
        label = t(f"status_{key}", look.lang)
        fig.add_bar(y=[names[i] for i in rows], x=[sizes[i] / 1024 for i in rows], orientation="h",
                    name=label, marker_color=STATUS_COLOURS[key], text=[label] * len(rows),
                    textposition="inside", insidetextanchor="start",
                    hovertemplate="%{y}: %{x:.1f} KB — " + label + "<extra></extra>")
    fig.update_yaxes(categoryorder="array", categoryarray=names, title=None)
    fig.update_xaxes(title=t("bytes", look.lang).replace("bytes", "KB").replace("字节", "KB"))
    fig.update_layout(barmode="stack", bargap=0.25, showlegend=False)
    return _frame(fig, look, t("fig_layers", look.lang), 120 + 30 * len(names))


# --- the recurrent memory and the conv window -----------------------------------------------------------

def memory_heatmaps(record, phase, look=Look()):
    """Six heatmaps of the watched DeltaNet layer/head memory: before / after verify / after, then
    after verify − before, after − before, and what the rollback removed (after verify − after; exactly
    zero when nothing was rolled back, or when the restore was skipped). Not yet reached: hidden."""
    states = record["states"]
    watch = (states.get("after") or states["before"])["watch"]
    shown = SHOWN[phase]
    titles = [t(s if s != "after" or record.get("rolled_back") else "after_accept", look.lang)
              for s in STATE_ORDER] + [t(d[0], look.lang) for d in DIFFS]
    fig = make_subplots(rows=2, cols=3, subplot_titles=titles, horizontal_spacing=0.04, vertical_spacing=0.12)
    grids = {s: states[s]["memory"] for s in STATE_ORDER if s in shown}
    diffs = {name: subtract(grids[a], grids[b]) for name, a, b in DIFFS if a in grids and b in grids}
    for i, s in enumerate(STATE_ORDER):
        z = grids.get(s)
        fig.add_heatmap(z=z or [[0.0]], coloraxis="coloraxis", visible=z is not None, name=s, row=1, col=i + 1,
                        hovertemplate="key %{y}, value %{x}: %{z:.4f}<extra>" + titles[i] + "</extra>")
    for i, (name, _, _) in enumerate(DIFFS):
        z = diffs.get(name)
        fig.add_heatmap(z=z or [[0.0]], coloraxis="coloraxis2", visible=z is not None, name=name, row=2, col=i + 1,
                        hovertemplate="key %{y}, value %{x}: %{z:.2e}<extra>" + titles[3 + i] + "</extra>")
    for i, ok in enumerate([s in grids for s in STATE_ORDER] + [d[0] in diffs for d in DIFFS]):
        if not ok:
            fig.add_annotation(text=t("not_yet", look.lang), showarrow=False, opacity=0.6,
                               xref=_axis("x", i + 1), yref=_axis("y", i + 1), x=0.5, y=0.5)
    top, dtop = _symmetric(grids.values()), _symmetric(diffs.values())
    bar = {"thickness": 14, "len": 0.42}
    fig.update_layout(
        coloraxis={"colorscale": DIVERGING, "cmin": -top, "cmax": top, "cmid": 0,
                   "colorbar": {**bar, "y": 0.79, "title": {"text": "S"}}},
        coloraxis2={"colorscale": DIVERGING, "cmin": -dtop, "cmax": dtop, "cmid": 0,
                    "colorbar": {**bar, "y": 0.21, "title": {"text": "Δ"}}})
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    title = t("fig_memory", look.lang, layer=watch["layer"], head=watch["head"])
    return _frame(fig, look, title, 560)


def conv_labels(run, record, which, columns):
    """Tick labels of the conv window's columns: position and token of the last K-1 tokens run, a ✗ on
    a column that holds a rejected guess."""
    labels = []
    for pos in stepper.conv_positions(record, which, columns):
        tok = stepper.token_at(run, pos, record, which)
        if tok is None:
            labels.append("∅")
            continue
        dirty = which == "after_verify" or (which == "after" and record.get("rollback") == "none")
        rejected = record.get("kind") == "round" and dirty and record["pos"] + record["accepted"] < pos
        text = run.labels.get(tok, f"#{tok}").replace("\n", "↵")
        labels.append(f"{'✗ ' if rejected else ''}{pos}<br>{text[:10]}")
    return labels


def conv_strip(record, phase, labels=None, look=Look()):
    """The conv window (channels, averaged, x K-1 columns; the right column is the newest token) before
    verify, after verify and after: it shifts by a column per token and snaps back on a rejection.
    labels: {state: [column tick labels]} (see conv_labels)."""
    states = record["states"]
    shown = SHOWN[phase]
    any_state = states.get("after") or states["before"]
    columns = len(any_state["conv"][0])
    titles = [t(s if s != "after" or record.get("rolled_back") else "after_accept", look.lang) for s in STATE_ORDER]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.06)
    grids = {s: states[s]["conv"] for s in STATE_ORDER if s in shown}
    for i, s in enumerate(STATE_ORDER):
        z = grids.get(s)
        fig.add_heatmap(z=z or [[0.0] * columns], coloraxis="coloraxis", visible=z is not None, name=s,
                        row=1, col=i + 1, hovertemplate="channel %{y}, column %{x}: %{z:.3f}<extra></extra>")
        ticks = (labels or {}).get(s) or [str(c) for c in range(columns)]
        fig.update_xaxes(tickvals=list(range(columns)), ticktext=ticks, tickangle=0, showticklabels=z is not None,
                         row=1, col=i + 1)
        if z is None:
            fig.add_annotation(text=t("not_yet", look.lang), showarrow=False, opacity=0.6,
                               xref=_axis("x", i + 1), yref=_axis("y", i + 1), x=0.5, y=0.5)
    top = _symmetric(grids.values())
    fig.update_layout(coloraxis={"colorscale": DIVERGING, "cmin": -top, "cmax": top, "cmid": 0,
                                 "colorbar": {"thickness": 14}})
    fig.update_yaxes(showticklabels=False)
    title = t("fig_conv", look.lang, layer=any_state["watch"]["layer"], n=columns)
    return _frame(fig, look, title, 330)


# --- KV caches -------------------------------------------------------------------------------------------

def kv_lengths(record, phase, look=Look()):
    """Positions held by each attention layer's KV cache and by the MTP head's, before / after verify /
    after: they grow by k+1 in verify and are cut back by position on a rejection."""
    states = record["states"]
    any_state = states.get("after") or states["before"]
    names = [f"L{la['index']}" for la in any_state["layers"] if la["kind"] == "attention"] + \
        [t("mtp_head", look.lang)]
    fig = go.Figure()
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
    return _frame(fig, look, t("fig_kv", look.lang), 330)


# --- the whole run ---------------------------------------------------------------------------------------

def _rounds(records):
    return [r for r in records if r.get("kind") == "round"]


def _mark_round(fig, current):
    if current:
        fig.add_vrect(x0=current - 0.5, x1=current + 0.5, fillcolor="#999999", opacity=0.25, line_width=0)


def cost_stack(records, current=None, look=Look()):
    """Per round, stacked milliseconds: draft, verify, snapshot, restore, re-run."""
    rounds = _rounds(records)
    x = [r["round"] for r in rounds]
    fig = go.Figure()
    for key, colour in COST_COLOURS.items():
        fig.add_bar(x=x, y=[r["seconds"].get(key, 0.0) * 1000 for r in rounds], name=t(f"cost_{key}", look.lang),
                    marker_color=colour)
    _mark_round(fig, current)
    prefill = records[0]["seconds"].get("prefill", 0.0) * 1000 if records else 0.0
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    fig.update_xaxes(title=t("round", look.lang))
    fig.update_yaxes(title=t("ms", look.lang))
    title = f"{t('fig_cost', look.lang)} <sub>(prefill {prefill:.1f} ms)</sub>"
    return _frame(fig, look, title, 330)


def acceptance_over_run(records, current=None, look=Look()):
    """Per round, how many guesses were accepted (bars), and the acceptance rate so far (line)."""
    rounds = _rounds(records)
    x = [r["round"] for r in rounds]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_bar(x=x, y=[r["accepted"] for r in rounds], name=t("accepted_per_round", look.lang),
                marker_color=OKABE_ITO["sky_blue"], secondary_y=False)
    rate = [stepper.acceptance(rounds[:i + 1])[0] for i in range(len(rounds))]
    fig.add_scatter(x=x, y=rate, name=t("acceptance_rate", look.lang), mode="lines",
                    line={"color": OKABE_ITO["vermillion"], "width": 3}, secondary_y=True)
    _mark_round(fig, current)
    k = rounds[0]["k"] if rounds else 1
    fig.update_yaxes(range=[0, k * 1.1], dtick=1, title=t("accepted_per_round", look.lang), secondary_y=False)
    fig.update_yaxes(range=[0, 1.1], tickformat=".0%", title=None, secondary_y=True, showgrid=False)
    fig.update_xaxes(title=t("round", look.lang))
    return _frame(fig, look, t("fig_acceptance", look.lang), 330)


def tokens_per_round(a, k):
    """Expected tokens a round yields with k guesses each accepted with probability a (independently):
    1 + a + a^2 + ... + a^k = (1 − a^(k+1)) / (1 − a)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def round_costs(records):
    """Mean seconds per round of draft, verify and snapshot, and of restore + re-run over the rounds
    that rolled back (0 when none did). -> dict"""
    rounds = _rounds(records)
    if not rounds:
        return {"draft": 0.0, "verify": 0.0, "snapshot": 0.0, "rollback": 0.0}
    mean = {key: sum(r["seconds"].get(key, 0.0) for r in rounds) / len(rounds)
            for key in ("draft", "verify", "snapshot")}
    back = [r["seconds"].get("restore", 0.0) + r["seconds"].get("rerun", 0.0) for r in rounds if r["rolled_back"]]
    mean["rollback"] = sum(back) / len(back) if back else 0.0
    return mean


def plain_step(records, plain_step_seconds=None):
    """-> (seconds of one plain step, whether it was measured); the mean verify time is the fallback."""
    if plain_step_seconds and plain_step_seconds > 0:
        return plain_step_seconds, True
    return round_costs(records)["verify"] or 1e-3, False


def speedup_at(a, k, costs, plain):
    """Predicted speed-up over plain decoding at acceptance a (see whatif_caption)."""
    cost = costs["draft"] + costs["verify"] + costs["snapshot"] + (1 - a ** k) * costs["rollback"]
    return tokens_per_round(a, k) / (max(cost, 1e-12) / plain)


def break_even(k, costs, plain, steps=1000):
    """Smallest acceptance rate at which speculative decoding is no slower than plain; None if never."""
    for i in range(steps + 1):
        if speedup_at(i / steps, k, costs, plain) >= 1.0:
            return i / steps
    return None


def what_if(records, plain_step_seconds=None, look=Look()):
    """Speed-up against the acceptance rate a (0..1) for this run's k and measured costs, with the
    break-even point and this run's measured acceptance (model and measured speed-up) marked."""
    rounds = _rounds(records)
    fig = go.Figure()
    if not rounds:                                       # a one-token run: nothing was speculated
        fig.add_annotation(text="—", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        return _frame(fig, look, t("fig_whatif", look.lang), 380)
    k = rounds[0]["k"]
    costs = round_costs(records)
    plain, timed = plain_step(records, plain_step_seconds)
    xs = [i / 100 for i in range(101)]
    fig.add_scatter(x=xs, y=[speedup_at(a, k, costs, plain) for a in xs], mode="lines", name=f"k = {k}",
                    line={"color": OKABE_ITO["blue"], "width": 3})
    fig.add_hline(y=1.0, line_dash="dot", line_color="#999999")
    even = break_even(k, costs, plain)
    if even is not None:
        fig.add_vline(x=even, line_dash="dash", line_color=OKABE_ITO["vermillion"],
                      annotation_text=t("break_even", look.lang, a=even), annotation_position="top left")
    a, hits, n = stepper.acceptance(records)
    if n:
        fig.add_scatter(x=[a], y=[speedup_at(a, k, costs, plain)], mode="markers", name=t("this_run", look.lang, a=a),
                        marker={"size": 14, "color": OKABE_ITO["orange"], "symbol": "diamond",
                                "line": {"width": 1, "color": "#000"}})
        emitted = sum(len(r["emitted"]) for r in rounds)
        spent = sum(sum(r["seconds"].values()) for r in rounds)
        if spent > 0:
            measured = emitted / spent * plain
            fig.add_scatter(x=[a], y=[measured], mode="markers", name=t("measured", look.lang, s=measured),
                            marker={"size": 12, "color": OKABE_ITO["bluish_green"], "symbol": "circle-open",
                                    "line": {"width": 3}})
    how = t("plain_timed" if timed else "plain_bound", look.lang)
    fig.update_xaxes(title=t("rate_a", look.lang), range=[0, 1])
    fig.update_yaxes(title=t("axis_speedup", look.lang), rangemode="tozero")
    fig.update_layout(legend={"yanchor": "bottom", "y": 0.02, "xanchor": "right", "x": 0.99, "orientation": "v"})
    title = f"{t('fig_whatif', look.lang)}<br><sub>plain step {plain * 1000:.2f} ms — {how}</sub>"
    if even is None:
        fig.add_annotation(text=t("no_break_even", look.lang), showarrow=False, xref="paper", yref="paper",
                           x=0.02, y=0.95, xanchor="left")
    return _frame(fig, look, title, 380)


def whatif_caption(records, plain_step_seconds=None, lang="English"):
    plain, timed = plain_step(records, plain_step_seconds)
    return t("whatif_caption", lang, plain=plain * 1000, how=t("plain_timed" if timed else "plain_bound", lang))


def drift(proof_drift, first_diff_round=None, look=Look()):
    """Per round of the restore-skipped run: how far its watched memory is from the correct run's."""
    x = list(range(1, len(proof_drift) + 1))
    fig = go.Figure()
    fig.add_scatter(x=x, y=proof_drift, mode="lines+markers", name=t("max_abs_diff", look.lang),
                    line={"color": OKABE_ITO["reddish_purple"], "width": 3}, connectgaps=False)
    if first_diff_round:
        fig.add_vline(x=first_diff_round, line_dash="dash", line_color=OKABE_ITO["vermillion"])
    fig.update_xaxes(title=t("round", look.lang))
    fig.update_yaxes(title=t("max_abs_diff", look.lang))
    return _frame(fig, look, t("fig_drift", look.lang), 300)
