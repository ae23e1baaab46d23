"""The stepper's tree mode: a draft-tree run (demo.stepper.treerec) drawn one phase at a time.

    fig = tree_figure(run, rec, "verify", Look())      # the tree: each node's guess, probability and verdict

Figures (plotly, the chain view's look: demo.stepper.figures) and HTML for a "tree_round" record:

    tree_figure       the tree, each node with the head's probability; ✓ / ✗ once verified, the walk to
                      the winning node and the main model's next token after it
    mask_figure       the chain's causal triangle beside the tree's ancestor mask, the cells a pass in
                      row order would wrongly let a row see marked ✗
    node_memories     each node's memory as a small heatmap placed as the tree is (what its path wrote into the
                      watched layer and head); under them what a pass in row order leaves there: a sibling's
                      token mixed in
    window_figure     each row's conv window: its ancestors' inputs, not the rows before it
    slots_figure      the KV slots the verify pass wrote (one per row) and, after the walk, the winning
                      path's moved into place, the rest cut
    panel_html, explanation, pending_chips     the phase's table, its words, the guesses in the text line
"""
from html import escape
from typing import NamedTuple

from demo.i18n import t
from demo.stepper.figures import (BARE, MARGIN, Look, axis_key, clipped_scale, diverging, framed, heatmap_panel,
                                  new_figure, panel_grid, panel_note, panel_title, title_margin, wrap_title)
from demo.stepper.panels import chip, table
from demo.stepper.steps import token_at, token_text
from demo.theme import OKABE_ITO
from qwen.tree import Tree

VERDICT_COLOURS = {"root": "#777777", "guess": OKABE_ITO["sky_blue"], "accepted": OKABE_ITO["bluish_green"],
                   "rejected": OKABE_ITO["vermillion"], "unchecked": "#BBBBBB"}
MARKS = {"root": "", "guess": "?", "accepted": "✓", "rejected": "✗", "unchecked": "–"}


def shape(rec):
    """The record's tree (qwen.tree.Tree: children, ancestors, depths)."""
    return Tree(tuple(rec["parents"]))


def verdicts(rec, phase):
    """Per row: root | guess (not verified yet) | accepted (on the walk) | rejected (its parent was accepted,
    the main model picked another token) | unchecked (its parent was not accepted: nobody asks)."""
    out = []
    for row, parent in enumerate(rec["parents"]):
        if row == 0:
            out.append("root")
        elif phase in ("guess", "prefill"):
            out.append("guess")
        elif row in rec["path"]:
            out.append("accepted")
        elif parent in rec["path"]:
            out.append("rejected")
        else:
            out.append("unchecked")
    return out


def _layout_positions(rec):
    """(x, y) per row: x = depth, y = order of the leaves below it (a parent centred on its children)."""
    kids, ys, next_leaf = shape(rec).children, {}, [0]

    def place(row):
        if not kids[row]:
            ys[row] = next_leaf[0]
            next_leaf[0] += 1
        else:
            for c in kids[row]:
                place(c)
            ys[row] = sum(ys[c] for c in kids[row]) / len(kids[row])
    place(0)
    return [(rec["depths"][r], -ys[r]) for r in range(len(rec["parents"]))], next_leaf[0]


def tree_figure(run, rec, phase, look=Look()):
    """The round's draft tree: each node's token and the head's probability of it; ✓ / ✗ / – from verify
    on, the accepted path drawn thick at accept with the main model's next token after it (a correction, or
    a bonus when the winner is a leaf)."""
    pos, leaves = _layout_positions(rec)
    marks = verdicts(rec, phase)
    path = rec["path"] if phase == "accept" else []
    data = []
    for row, parent in enumerate(rec["parents"][1:], start=1):
        on = row in path and parent in path
        (x0, y0), (x1, y1) = pos[parent], pos[row]
        data.append({"type": "scatter", "x": [x0, x1], "y": [y0, y1], "mode": "lines", "hoverinfo": "skip",
                     "showlegend": False, "line": {"width": 6 if on else 2,
                                                   "color": VERDICT_COLOURS["accepted"] if on else "#999999"}})
    texts, hovers, colours = [], [], []
    for row, token in enumerate(rec["tokens"]):
        node = rec["nodes"][row]
        mark = MARKS[marks[row]]
        prob = "" if node is None else f"<br>q {node['prob'] * 100:.1f}%"
        texts.append(f"{'<b>' if row in path else ''}{mark} {escape(token_text(run, token, 10))}"
                     f"{'</b>' if row in path else ''}{prob}")
        pick = f" · {t('tree_main_after', look.lang, token=token_text(run, rec['picks'][row], 10))}" \
            if phase in ("verify", "accept") else ""
        hovers.append(escape(f"{t('tree_row', look.lang, r=row)} · {t(f'tree_v_{marks[row]}', look.lang)}") +
                      escape(pick))
        colours.append(VERDICT_COLOURS[marks[row]])
    data.append({"type": "scatter", "x": [p[0] for p in pos], "y": [p[1] for p in pos], "mode": "markers+text",
                 "text": texts, "textposition": "top center", "hovertext": hovers, "hoverinfo": "text",
                 "showlegend": False, "name": "nodes", "cliponaxis": False,
                 "marker": {"size": 22 if look.presenter else 18, "color": colours,
                            "line": {"width": 2, "color": "#333333"}}})
    notes = []
    if phase == "accept":           # the winner ringed; the main model's next token said in the corner
        winner = rec["path"][-1]
        origin = "correction" if rec["rolled_back"] else "bonus"
        colour = OKABE_ITO["vermillion"] if origin == "correction" else OKABE_ITO["bluish_green"]
        data.append({"type": "scatter", "x": [pos[winner][0]], "y": [pos[winner][1]], "mode": "markers",
                     "showlegend": False, "hoverinfo": "skip", "name": "winner",
                     "marker": {"size": 40 if look.presenter else 34, "symbol": "circle-open",
                                "line": {"width": 3, "color": colour}}})
        next_words = t("tree_next", look.lang, row=winner, token=token_text(run, rec["next_token"], 10),
                       origin=t("short_origin_" + origin, look.lang))
    depth = max(rec["depths"])
    layout = {"xaxis": {"range": [-0.4, depth + 0.6], "tickvals": list(range(depth + 1)),
                        "ticktext": [t("tree_depth", look.lang, d=d) for d in range(depth + 1)], "showgrid": False,
                        "zeroline": False},
              "yaxis": {"visible": False, "range": [-leaves + 0.3, 1.0]}, "annotations": notes, "showlegend": False}
    sub = t("fig_tree_" + ("guess" if phase in ("guess", "prefill") else phase), look.lang)
    if phase == "accept":
        sub += f"<br><span style='color:{colour}'>◯ {escape(next_words)}</span>"
    title = t("fig_tree", look.lang, shape=run.settings.tree, rows=len(rec["tokens"])) + f"<br><sub>{sub}</sub>"
    longest = title if phase == "accept" else title + "<br>" + "xxxx " * 14    # the same height in every phase
    return framed(new_figure(data, layout), look, title, 150 + 90 * leaves, half=True, room_for=longest)


def _categories(name, z, x, y, colours, gap, **more):
    """A heatmap of cells of three kinds (z: 0, 1 or 2), each kind in its colour of `colours`, with no colour bar;
    `gap`: pixels between cells."""
    scale = [[at, colour] for colour, ats in zip(colours, ((0, 0.33), (0.34, 0.66), (0.67, 1))) for at in ats]
    return {"type": "heatmap", "z": z, "x": x, "y": y, "zmin": 0, "zmax": 2, "colorscale": scale, "showscale": False,
            "xgap": gap, "ygap": gap, "name": name, **more}


def chain_mask(k):
    """The causal mask of a chain round: tok, d1..dk, each row seeing itself and every row before it."""
    return [[int(c <= r) for c in range(k + 1)] for r in range(k + 1)]


def mask_cells(rec):
    """The tree's mask as cells: 1 = an ancestor (seen), 2 = before it in row order but not an ancestor (what a
    pass in row order would wrongly let it see: a sibling's branch), 0 = not seen either way."""
    return [[1 if seen else (2 if c < r else 0) for c, seen in enumerate(row)] for r, row in enumerate(rec["mask"])]


def mask_figure(run, rec, phase, look=Look()):
    """The chain's causal triangle (k + 1 rows) beside the tree's ancestor mask (one row per node), rows and
    columns named by their tokens; the cells a pass in row order would let a row see, wrongly, marked ✗."""
    k = rec["k"]
    rows = [f"{r}: {token_text(run, tok, 8)}" for r, tok in enumerate(rec["tokens"])]
    chain_rows = ["tok"] + [f"d{i}" for i in range(1, k + 1)]
    cells = mask_cells(rec)
    narrow, n, side = look.narrow, len(rows), k + 1
    # square cells (each panel keeps its aspect ratio inside its domain); on a phone one panel above the other
    square = {"constrain": "domain", "showgrid": False}
    axes = {"xaxis": {**square, "domain": [0, 1] if narrow else [0, 0.36], "anchor": "y", "side": "top"},
            "yaxis": {**square, "domain": [0.62, 1] if narrow else [0.08, 1], "anchor": "x", "autorange": "reversed",
                      "scaleanchor": "x"},
            "xaxis2": {**square, "domain": [0, 1] if narrow else [0.44, 1], "anchor": "y2", "side": "top"},
            "yaxis2": {**square, "domain": [0, 0.5] if narrow else [0.08, 1], "anchor": "x2",
                       "autorange": "reversed", "scaleanchor": "x2"}}
    text = [["✓" if v == 1 else "✗" if v == 2 else "" for v in row] for row in cells]
    colours, hover = ("#F2F2F2", OKABE_ITO["blue"], OKABE_ITO["orange"]), "%{y} ← %{x}<extra></extra>"
    data = [_categories("chain", chain_mask(k), chain_rows, chain_rows, colours, 2, xaxis="x", yaxis="y",
                        hovertemplate=hover),
            _categories("tree", cells, rows, rows, colours, 2, xaxis="x2", yaxis="y2", text=text,
                        texttemplate="%{text}", hovertemplate=hover)]
    under = {"y": 0.0, "yshift": -6, "yanchor": "top", "name": "panel-title"}      # each panel's name under it
    notes = [panel_note(t("mask_chain", look.lang, k=k), ("x", "y"), **under),
             panel_note(t("mask_tree", look.lang), ("x2", "y2"), **under)]
    title = t("fig_mask", look.lang) + f"<br><sub>{t('fig_mask_sub', look.lang)}</sub>"
    height = (200 + 44 * n) * (2 if narrow else 1) + 40 * (side < n)
    return framed(new_figure(data, {**axes, "annotations": notes}), look, title, height)


class TreeLayout(NamedTuple):
    """Where node_memories draws a tree round's panels (_tree_layout)."""
    axes: dict              # layout's xaxis/yaxis entries
    refs: list              # [(xref, yref)]: the tree's panels, then row order's
    links: list             # line shapes, parent to child
    height: int


def _tree_layout(rec, top, title_px, panel_px=120, gap_px=10, group_px=34):
    """Axes for node_memories on a wide screen: under a group title (group_px), the tree's panels where its nodes
    are (depth across, the leaves' order down; a parent level with the middle of its children), joined parent to
    child by lines, and under another group title row order's panels in one row.
    -> TreeLayout"""
    pos, leaves = _layout_positions(rec)
    n, depth = len(pos), max(rec["depths"])
    row_px = title_px + panel_px + gap_px
    tree_px = leaves * row_px
    height = top + MARGIN["b"] + group_px + tree_px + group_px + title_px + panel_px + gap_px
    plot_h = height - top - MARGIN["b"]
    column = 1 / (depth + 1)
    width = min(0.62 * column, 0.16)
    axes, refs, boxes = {}, [], []

    def add(x0, x1, top_px):
        i = len(refs) + 1
        suffix = str(i) if i > 1 else ""
        y1 = 1 - top_px / plot_h
        y0 = y1 - panel_px / plot_h
        axes[f"xaxis{suffix}"] = {"domain": [x0, x1], "anchor": f"y{suffix}"}
        axes[f"yaxis{suffix}"] = {"domain": [max(0.0, y0), y1], "anchor": f"x{suffix}"}
        refs.append((f"x{suffix}", f"y{suffix}"))
        boxes.append((x0, x1, y0, y1))
    for d, y in pos:                                     # y: minus the leaf order
        x0 = d * column + (column - width) / 2
        add(x0, x0 + width, group_px - y * row_px + title_px)
    gap = 0.04 if n > 1 else 0.0
    each = (1 - gap * (n - 1)) / n
    for i in range(n):
        add(i * (each + gap), i * (each + gap) + each, group_px + tree_px + group_px + title_px)
    links = []
    for row, parent in enumerate(rec["parents"][1:], start=1):
        (_, px1, py0, py1), (cx0, _, cy0, cy1) = boxes[parent], boxes[row]
        links.append({"type": "line", "xref": "paper", "yref": "paper", "x0": px1, "y0": (py0 + py1) / 2,
                      "x1": cx0, "y1": (cy0 + cy1) / 2, "line": {"color": "#999999", "width": 2}, "layer": "below"})
    return TreeLayout(axes=axes, refs=refs, links=links, height=height)


def node_memories(run, rec, phase, look=Look(), scale=None):
    """Each node's memory, the watched DeltaNet layer and head: what its path wrote (its memory minus the
    memory before the round), one small heatmap per node placed as the tree is (_tree_layout; on a phone a
    row per node); under them each row after a pass in row order (a chain engine's), with how far it is from the
    right one. Written by verify:
    before it the panels say so; at accept the winner's panel is the one selected (or recomputed)."""
    mem = rec.get("memory")
    n = len(rec["tokens"])
    title = t("fig_nodes", look.lang, layer=(mem or {}).get("layer", "?"), head=(mem or {}).get("head", "?")) + \
        f"<br><sub>{t('fig_nodes_sub', look.lang)}</sub>"
    if mem is None:
        note = {"text": t("tree_no_memory", look.lang), "showarrow": False, "xref": "paper", "yref": "paper",
                "x": 0.5, "y": 0.5}
        return framed(new_figure([], {"annotations": [note]}), look, title, 200)
    shown = phase in ("verify", "accept")
    marks = verdicts(rec, phase)
    winner = rec["path"][-1] if phase == "accept" else None
    tree_panels, row_panels = [], []
    for row in range(n):
        name = f"{row}: {token_text(run, rec['tokens'][row], 8)}"
        tail = f" {MARKS[marks[row]]}" if row else ""
        if row == winner:
            tail = " ★ " + t("tree_selected" if rec["rollback"] == "select" else "tree_recomputed", look.lang)
        tree_panels.append((f"tree{row}", name + tail, mem["tree"][row] if shown else None))
        wrong = rec["mixed"][row]
        same = t("tree_same_short" if look.narrow else "tree_same", look.lang)
        words = same if wrong < 1e-3 else t("tree_wrong", look.lang, x=wrong)
        row_panels.append((f"row{row}", words if look.narrow else f"{name} · {words}",
                           mem["row_order"][row] if shown else None))
    # wide: the tree's panels laid out as the tree (depth across, leaves down, parent to child joined), row
    # order's in one row under them; a phone: a row per node, tree | row order
    if look.narrow:
        cols, groups = 2, [[a, b] for a, b in zip(tree_panels, row_panels)]
        panels = [p for g in groups for p in g]
        title_px, axis_px = (48, 12) if not look.presenter else (64, 16)
        axes, refs, height = panel_grid(groups, cols, title_margin(title, look) + 40, 110, title_px, axis_px)
        links = []
    else:
        panels = tree_panels + row_panels
        cols = n
        title_px = 44 if not look.presenter else 60
        top = title_margin(title, look)
        axes, refs, links, height = _tree_layout(rec, top, title_px, group_px=2 * look.font + 10)
    data, notes = [], []
    for (name, words, grid), ref in zip(panels, refs):
        data.append(heatmap_panel(name, grid or [[0.0]], ref, grid is not None, "%{y}, %{x}: %{z:.4f}<extra></extra>"))
        axes[axis_key("x", ref[0])].update(showticklabels=False, **BARE)
        axes[axis_key("y", ref[1])].update(showticklabels=False, **BARE, autorange="reversed")
        bad = name.startswith("row") and not words.endswith(same)
        notes.append(panel_title(wrap_title(words, 18 if look.narrow else max(12, 90 // cols)), axes, ref,
                                 {"size": look.font - 2, **({"color": OKABE_ITO["vermillion"]} if bad else {})}, 2))
        if grid is None:
            notes.append(panel_note(t("not_yet", look.lang), ref, opacity=0.6))
    short = "_short" if look.narrow else ""             # a phone: the columns' short names
    tree_title = {"text": f"<b>{t('nodes_tree_row' + short, look.lang)}</b>", "name": "group-title"}
    row_title = {"text": f"<b>{t('nodes_row_order' + short, look.lang)}</b>", "name": "group-title",
                 "font": {"color": OKABE_ITO["vermillion"]}}
    if look.narrow:                                      # column headings over the first pair
        x_left, x_right = (sum(axes[axis_key("x", refs[i][0])]["domain"]) / 2 for i in (0, 1))
        first_y = axes["yaxis"]["domain"][1]
        notes += [{**tree_title, "x": x_left, "xanchor": "center", "y": first_y},
                  {**row_title, "x": x_right, "xanchor": "center", "y": first_y}]
    else:                                                # over the tree, and over row order's row
        row_y = axes[axis_key("y", refs[n][1])]["domain"][1]
        notes += [{**tree_title, "x": 0, "xanchor": "left", "y": 1.0, "yshift": 0, "yanchor": "top"},
                  {**row_title, "x": 0, "xanchor": "left", "y": row_y}]
    for note in notes[-2:]:
        note.update({"xref": "paper", "yref": "paper", "showarrow": False})
        note.setdefault("yanchor", "bottom")
        note.setdefault("yshift", title_px - 4)
    bound = scale or clipped_scale(mem["tree"])
    layout = {**axes, "annotations": notes, "shapes": links,
              "coloraxis": diverging(bound, thickness=12, len=0.5, x=1.01, title={"text": "ΔS", "side": "top"})}
    return framed(new_figure(data, layout), look, title, height, fixed=True)


def _window_sources(rec, row, chain=False):
    """The K inputs row `row`'s conv reads, as indices into [the state's K-1 last inputs, then the rows]:
    the recorded ancestor windows, or (chain=True) what a pass in row order reads: the rows before it."""
    if not chain:
        return rec["windows"][row]
    K = rec["kernel"]
    return (list(range(K - 1)) + [K - 1 + r for r in range(row + 1)])[-K:]


def _source_token(run, rec, index):
    """The token behind a conv input (an index as _window_sources gives it) and where it comes from: "row" (a row of
    the round) or "before" (the input the state kept from before the round; None: before the sequence)."""
    K = rec["kernel"]
    if index >= K - 1:
        return rec["tokens"][index - (K - 1)], "row"
    return token_at(run, rec["pos"] - (K - 1) + index), "before"


def window_figure(run, rec, phase, look=Look()):
    """Each row's conv window (its K inputs, oldest first): inputs from before the round (grey), its
    ancestors' rows (sky blue), its own (blue); a cell that a pass in row order would fill with another
    row's input is marked ✗ with that token."""
    K, n = rec["kernel"], len(rec["tokens"])
    z, text, hover = [], [], []
    for row in range(n):
        mine, chain = _window_sources(rec, row), _window_sources(rec, row, chain=True)
        zr, tr, hr = [], [], []
        for i, (src, other) in enumerate(zip(mine, chain)):
            token, kind = _source_token(run, rec, src)
            own = i == K - 1
            zr.append(0 if kind == "before" else (2 if own else 1))
            label = "∅" if token is None else token_text(run, token, 8)
            if src != other:
                wrong_token, _ = _source_token(run, rec, other)
                label += f"<br>✗ {token_text(run, wrong_token, 6) if wrong_token is not None else '∅'}"
            tr.append(label)
            hr.append(t("window_" + ("own" if own else kind), look.lang))
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    names = [f"{r}: {token_text(run, tok, 8)}" for r, tok in enumerate(rec["tokens"])]
    cols = [t("window_col", look.lang, i=i - K + 1) if i < K - 1 else t("window_self", look.lang) for i in range(K)]
    data = [_categories("windows", z, cols, names, ("#DDDDDD", OKABE_ITO["sky_blue"], OKABE_ITO["blue"]), 3,
                        text=text, texttemplate="%{text}", customdata=hover, textfont={"size": look.font - 2},
                        hovertemplate="%{y} · %{x}: %{customdata}<extra></extra>")]
    layout = {"xaxis": {"showgrid": False}, "yaxis": {"autorange": "reversed", "showgrid": False}}
    title = t("fig_windows", look.lang, k=K) + f"<br><sub>{t('fig_windows_sub', look.lang)}</sub>"
    return framed(new_figure(data, layout), look, title, 140 + 56 * n)


def slots_figure(run, rec, phase, look=Look()):
    """KV slots of every attention layer: the verify pass writes row r at slot P + r (rotated at its depth);
    after the walk the winning path's slots are moved to P, P+1, … and the rest cut off."""
    P, n, path = rec["pos"], len(rec["tokens"]), rec["path"]
    rows = [t("slots_verify", look.lang)] + ([t("slots_accept", look.lang)] if phase == "accept" else [])
    x = [str(P + i) for i in range(n)]
    written = phase in ("verify", "accept")
    z = [[1 if written else 0] * n]
    def name(r):
        """A slot's row: its number, and on a wide screen its token."""
        return str(r) if look.narrow else f"{r}: {token_text(run, rec['tokens'][r], 7)}"
    text = [[name(r) if written else "" for r in range(n)]]
    if phase == "accept":
        z.append([2 if i < len(path) else 0 for i in range(n)])
        text.append([name(path[i]) if i < len(path) else "✗" if look.narrow else t("slot_cut", look.lang)
                     for i in range(n)])
    data = [_categories("slots", z, x, rows, ("#EEEEEE", OKABE_ITO["orange"], OKABE_ITO["bluish_green"]), 3,
                        text=text, texttemplate="%{text}", hoverinfo="skip", textfont={"size": look.font - 2})]
    layout = {"xaxis": {"title": t("slot_position", look.lang), "type": "category", "showgrid": False},
              "yaxis": {"autorange": "reversed", "showgrid": False}}
    title = t("fig_slots", look.lang) + f"<br><sub>{t('fig_slots_sub', look.lang)}</sub>"
    return framed(new_figure(data, layout), look, title, 220 + 50 * len(rows), half=True)


# --- words ---------------------------------------------------------------------------------------------------

def _chip(run, token, cls=""):
    return chip(run, token, cls, chars=24)


def pending_chips(run, rec, phase, lang):
    """The round's guesses in the text line: every node in row order, ? while guessed, ✓ / ✗ / – once verified."""
    marks = verdicts(rec, phase)
    return '<span class="step-pending">' + "".join(
        _chip(run, tok, "step-guess") + f"<sup>{MARKS[marks[row]]}</sup>"
        for row, tok in enumerate(rec["tokens"]) if row) + "</span>"


def panel_html(run, rec, phase, lang):
    """The phase's table: the guesses with their parents and probabilities; the verify rows with the main
    model's pick after each (and, where a pass in row order would pick otherwise, that pick); or what the
    round kept and what each kind of state did."""
    marks = verdicts(rec, phase)
    if phase == "guess":
        head = [f"<tr><th>{escape(t('tree_row_h', lang))}</th><th>{escape(t('tree_parent_h', lang))}</th>"
                f"<th>{escape(t('guess', lang))}</th><th>q</th><th>{escape(t('tree_rank_h', lang))}</th></tr>"]
        body = [f"<tr><td>{row}</td><td>{_chip(run, rec['tokens'][rec['parents'][row]])}</td>"
                f"<td>{_chip(run, tok, 'step-guess')}</td><td>{rec['nodes'][row]['prob'] * 100:.1f}%</td>"
                f"<td>#{rec['nodes'][row]['rank'] + 1}</td></tr>" for row, tok in enumerate(rec["tokens"]) if row]
        return f"<h4>{escape(t('tree_guesses', lang, n=len(rec['tokens']) - 1))}</h4>" + table(head + body)
    if phase == "verify":
        head = [f"<tr><th>{escape(t('tree_row_h', lang))}</th><th>{escape(t('tree_path_h', lang))}</th>"
                f"<th>{escape(t('main_choice', lang))}</th><th></th><th>{escape(t('tree_roworder_h', lang))}</th></tr>"]
        body = []
        for row, tok in enumerate(rec["tokens"]):
            path = " ".join(_chip(run, rec["tokens"][a]) for a in shape(rec).ancestors(row))
            other = rec["row_picks"][row]
            differs = other != rec["picks"][row]
            cell = _chip(run, other, "step-bad") + " ≠" if differs else escape(t("tree_same_pick", lang))
            cls = {"accepted": "step-ok", "rejected": "step-bad"}.get(marks[row], "step-skipped")
            pick = _chip(run, rec["picks"][row], "tok-main")
            body.append(f"<tr class='{cls}'><td>{row}</td><td>{path}</td><td>{pick}</td>"
                        f"<td class='step-mark'>{MARKS[marks[row]]}</td><td>{cell}</td></tr>")
        return table(head + body)
    n, winner = rec["accepted"], rec["path"][-1]
    chips = " ".join(_chip(run, e["token"], f"tok tok-{e['origin']}") +
                     f"<small> {escape(t('short_origin_' + e['origin'], lang))}</small>" for e in rec["emitted"])
    memory = t("tree_mem_select" if rec["rollback"] == "select" else "tree_mem_recompute", lang, row=winner, n=n + 1)
    cut = len(rec["tokens"]) - len(rec["path"])
    walk = " → ".join(_chip(run, rec["tokens"][r]) for r in rec["path"])
    kv = t("tree_kv_moved", lang, rows=", ".join(map(str, rec["path"])), p=rec["pos"], cut=cut)
    rows = [f"<tr><td>{escape(t('emitted', lang))}</td><td>{chips}</td></tr>",
            f"<tr><td>{escape(t('tree_walk_h', lang))}</td><td>{walk}</td></tr>",
            f"<tr><td>KV</td><td>{escape(kv)}</td></tr>",
            f"<tr><td>DeltaNet</td><td>{escape(memory)}</td></tr>"]
    return table(rows)


def explanation(run, rec, phase, lang):
    """The spoken words of a tree round's phase (Markdown)."""
    if phase == "guess":
        return t("tree_explain_guess", lang, shape=run.settings.tree, n=len(rec["tokens"]) - 1)
    if phase == "verify":
        mixed = max(rec["mixed"])
        return t("tree_explain_verify", lang, rows=len(rec["tokens"])) + "\n\n" + \
            t("tree_explain_pitfall", lang, x=mixed)
    n = rec["accepted"]
    key = "tree_explain_bonus" if not rec["rolled_back"] else "tree_explain_correction"
    return t(key, lang, n=n, m=n + 1, row=rec["path"][-1]) + " " + \
        t("tree_explain_" + ("select" if rec["rollback"] == "select" else "recompute"), lang)
