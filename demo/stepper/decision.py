"""k="auto" in the stepper: how many tokens a round chose to draft, drawn and said in one sentence.

A round of k="auto" records its choice, made before it drafted (qwen.adaptive.decision, plain data): per position
the chance its draft is right when those before it are, as the latest rounds found (chance), the chance every draft
up to it is right (reach: the tokens it adds to a round on average) and the reach above which drafting it pays
(pays_above); how many the round drafted, and a round's cost by length in plain steps. The figure draws each
position's reach as a bar (drafted or not) against its break-even mark, and its chance as a dot; the sentence names
the position the round stopped before, what it would have cost and returned.

    fig = decision_figure(run.records[3], Look())
    text = decision_caption(run.records[3], "English")
"""
from demo.i18n import t
from demo.stepper.figures import Look, framed, new_figure
from demo.theme import OKABE_ITO


def _added(d, j):
    """Guess j's (1-based) cost in plain steps: a round of j drafts less a round of j - 1."""
    return d["steps"][j] - d["steps"][j - 1]


def decision_figure(record, look=Look()):
    """One round's choice: per position, the chance that its draft and every one before it are right (a bar:
    coloured where drafted, grey where not) against the chance above which drafting it pays (a mark), and the
    position's own chance lately (a dot). A plain step in a rest says so in words."""
    d = record.get("decision") if record else None
    fig = new_figure()
    title = t("fig_decision", look.lang)
    if not d or not d.get("chance"):
        text = t("decision_rest_short" if d and d.get("rested") else "decision_none", look.lang)
        fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return framed(fig, look, title, 380)
    n, kept = len(d["chance"]), d["kept"]
    x = [t("decision_guess", look.lang, j=j) for j in range(1, n + 1)]
    grey = "#BBBBBB"
    if kept:
        fig.add_bar(x=x[:kept], y=d["reach"][:kept], name=t("decision_kept", look.lang),
                    marker_color=OKABE_ITO["bluish_green"], width=0.5)
    if kept < n:
        fig.add_bar(x=x[kept:], y=d["reach"][kept:], name=t("decision_dropped", look.lang), marker_color=grey,
                    width=0.5)
    fig.add_scatter(x=x, y=[max(0.0, b) for b in d["pays_above"]], mode="markers", name=t("decision_pays", look.lang),
                    marker={"symbol": "line-ew", "size": 28 if look.narrow else 56, "color": OKABE_ITO["vermillion"],
                            "line": {"width": 4, "color": OKABE_ITO["vermillion"]}})
    fig.add_scatter(x=x, y=d["chance"], mode="markers", name=t("decision_head", look.lang),
                    marker={"size": 11, "color": OKABE_ITO["blue"], "symbol": "circle"})
    # the legend under the plot (plotly makes room for it): above it, on a phone, its four rows met the title
    fig.update_layout(barmode="overlay", bargap=0.4,
                      legend={"orientation": "h", "yanchor": "top", "y": -0.15, "xanchor": "left", "x": 0.0},
                      xaxis={"type": "category", "categoryorder": "array", "categoryarray": x},
                      yaxis={"range": [0, 1.05], "tickformat": ".0%", "title": {"text": t("decision_axis", look.lang)}})
    return framed(fig, look, title, 380)


def decision_sentence(record, lang="English"):
    """Why the round drafted as many as it did, in one sentence with its numbers ("" for a round of a fixed k)."""
    d = record.get("decision") if record else None
    if not d:
        return ""
    if d.get("rested"):
        return t("decision_rested", lang)
    n, m = len(d["chance"]), d["kept"]
    if d.get("probe") and m:
        return t("decision_probe", lang, m=m, chance=d["chance"][0], cost=d["steps"][m] - d["steps"][0])
    j = m + 1 if m < n else m                   # the position it stopped before, or its last
    words = "decision_all_max" if m == n else "decision_stopped" if m else "decision_plain"
    return t(words, lang, m=m, j=j, chance=d["reach"][j - 1], cost=_added(d, j), tokens=d["reach"][j - 1],
             even=max(0.0, d["pays_above"][j - 1]))


def decision_caption(record, lang="English"):
    """Under the figure: the round's sentence, then how k="auto" chooses, with this host's round costs."""
    d = (record or {}).get("decision")
    steps = t("decision_steps", lang, costs=" · ".join(f"{x:.2f}" for x in d["steps"])) if d else "—"
    return "\n\n".join(p for p in (decision_sentence(record, lang), t("decision_how", lang, steps=steps)) if p)
