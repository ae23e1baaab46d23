"""The race as HTML: each lane's text box (tokens marked by origin: demo.tokens), stats, verdict.

    spec_text_html(["Hel", "lo", "!"], ["main", "draft", "bonus"])
    -> '<div class="race-text"><span class="tok tok-main">Hel</span><span class="tok tok-draft" ...>lo</span>...'
"""
from html import escape

from qwen import costs
from demo.race import repeating, speedup, spread
from demo.i18n import is_zh, t
from demo.tokens import text_html, token_spans
from qwen.tree import parse_tree


def _text_box(inner, running=False, ended="", lang="English", extra_class="", run=None):
    """A lane's text box. A finished run's box carries data-times: the engine second at which each of
    its token spans appeared (tokens that completed no character have no span), for the replay."""
    cursor = '<span class="cursor">▍</span>' if running else ""
    end = f'<span class="end-mark" title="{escape(t("ended_stop", lang))}">⏎</span>' if ended == "stop" else ""
    times = ""
    if run is not None and run.ended:
        shown = [f"{s:.4f}" for piece, s in zip(run.pieces, run.token_times) if piece]
        every = ",".join(f"{s:.4f}" for s in run.token_times)
        times = f' data-times="{",".join(shown)}" data-token-times="{every}"'
    return f'<div class="race-text{extra_class}"{times}>{inner}{cursor}{end}</div>'


def waiting_html(lang="English"):
    return f'<div class="race-text empty">{escape(t("waiting", lang))}</div>'


def lane_off_html(lang="English"):
    """The third lane's text when the race does not run it (rollback is not "both")."""
    return f'<div class="race-text empty">{escape(t("lane_off", lang))}</div>'


def plain_text_html(run, lang="English"):
    """The plain run's text, escaped; a blinking cursor while it runs, ⏎ when it reached a stop token."""
    if not run.started:
        return waiting_html(lang)
    if not run.ended:
        return _text_box(text_html(run.text), running=True, lang=lang)
    spans = "".join(f'<span class="rt">{text_html(p)}</span>' for p in run.pieces if p)    # one per token, to replay
    return _text_box(spans, ended=run.ended, lang=lang, run=run)


def spec_text_html(run, lang="English"):
    """The speculative run's text, each token coloured and marked by where it came from."""
    if not run.started:
        return waiting_html(lang)
    return _text_box(token_spans(run.pieces, run.origins, lang), running=not run.ended, ended=run.ended, lang=lang,
                     run=run)


def _stat(value, label):
    return f'<span class="stat"><span class="num">{escape(value)}</span><span class="lbl">{escape(label)}</span></span>'


def stats_html(run, lang="English", max_seconds=120.0):
    """Elapsed seconds, tokens, tok/s; for speculative runs also rounds, accepted drafts, acceptance."""
    if run is None or not run.started:
        return '<div class="race-stats"></div>'
    parts = [_stat(f"{run.seconds:.2f}", t("elapsed", lang)), _stat(str(len(run.tokens)), t("tokens", lang)),
             _stat(f"{run.tok_s:.1f}", t("speed", lang))]
    if run.kind == "speculative":
        parts += [_stat(str(run.rounds), t("rounds", lang)), _stat(str(run.hits), t("hits", lang)),
                  _stat(f"{run.acceptance:.0%}", t("acceptance", lang)),
                  f'<span class="ended setup">{escape(setup_text(run, lang))}</span>']
        if run.kept is not None and run.ended:
            parts.append(f'<span class="ended setup auto-kept">{escape(kept_text(run, lang))}</span>')
    if run.ended:
        why = {"stop": t("ended_stop", lang), "length": t("ended_length", lang),
               "time": t("ended_time", lang, seconds=max_seconds)}[run.ended]
        parts.append(f'<span class="ended end-why">{escape(why)}</span>')
    return f'<div class="race-stats"{replay_data(run)}>{"".join(parts)}</div>'


def replay_data(run):
    """A finished lane's counts along its clock, for the replay (race-replay.html) to move with it:
    data-end (the lane's last second), and for a speculative lane data-round-times (each round's end, engine
    seconds), data-round-hits (accepted drafts in each) and data-k (guesses a round)."""
    if not run.ended:
        return ""
    out = f' data-end="{run.seconds:.4f}"'
    if run.kind == "speculative":
        ends, hits, i = [], [], 1                   # the prefill's token first
        for _, end, n in run.passes[1:]:
            ends.append(f"{end:.4f}")
            hits.append(str(sum(origin == "draft" for origin in run.origins[i:i + n])))
            i += n
        k = f"{run.drafted / run.rounds:.4f}" if run.kept is not None and run.rounds else run.k     # auto: the mean
        out += f' data-round-times="{",".join(ends)}" data-round-hits="{",".join(hits)}" data-k="{k}"'
    return out


def setup_text(run, lang="English"):
    """A speculative lane's setting in a few words: "k = 2 · select", or "tree 2+1 · select"."""
    if run.tree:
        return t("tree_setup", lang, tree=run.tree, rollback=run.rollback)
    return t("spec_setup", lang, k=k_label(run, lang), rollback=run.rollback)


def k_label(run, lang="English"):
    """A chain lane's k as the page names it: "2", or for k="auto" "auto (0-3)"."""
    return t("k_auto", lang, k=run.k) if run.kept is not None else run.k


def verify_rows(run):
    """Rows of a chain lane's verify pass: k + 1, or with k="auto" "1-4" (each round its own)."""
    return f"1-{run.k + 1}" if run.kept is not None else run.k + 1


def kept_text(run, lang="English"):
    """k="auto": how many rounds kept each length, "rounds by drafts kept: 0 × 3 · 1 × 20 · 2 × 15"."""
    counts = " · ".join(f"{m} × {n}" for m, n in sorted(run.kept.items()) if n)
    return t("auto_kept", lang, counts=counts or "–")


def verdict_html(verdict, plain=None, lanes=(), lang="English", *, lane_costs=(), speedups=None, skipped=""):
    """The verdict: a headline in large type (headline_html), then the verdict in words, then what explains
    the speed-up (speed_html). lanes: the speculative lanes (demo.race.RaceUpdate.lanes), lane_costs their
    cost terms; with a second chain lane (rollback "both"), each lane's speed-up and why (lanes_speed_html).
    speedups: per lane, its speed-up in every race run (RaceUpdate.speedups; None: the shown race alone). A
    tree lane is compared with the chain lane instead (tree_speed_html); the headline stays the chain's.
    skipped "busy": the unseen repeats gave way to visitors waiting, and the headline says so."""
    if verdict is None:
        return '<div class="verdict"></div>'
    tone = "ok" if verdict.key in ("verdict_identical", "verdict_identical_all", "verdict_prefix",
                                   "verdict_shared_noise", "verdict_shared_noise_all") else (
        "bad" if verdict.key in ("verdict_diverged", "verdict_diverged_lane") else "info")
    lanes = list(lanes)
    lane_costs = list(lane_costs) + [None] * (len(lanes) - len(lane_costs))
    spec, measured = (lanes[0], lane_costs[0]) if lanes else (None, None)
    second = lanes[1] if len(lanes) > 1 else None
    if plain is not None and lanes and not speedups and all(run is not None and run.tok_s for run in lanes):
        speedups = [[speedup(plain, run)] for run in lanes]
    # markup first, then the (escaped) values: model text may hold "*" or "<"
    params = {k: escape(v) if isinstance(v, str) else v for k, v in verdict.params.items()}
    body = _markup(escape(t(verdict.key, lang))).format(**params)
    tree = second is not None and bool(second.tree)
    head = headline_html(verdict, spec, speedups[0 if tree else -1], lang, skipped) \
        if speedups and spec is not None else ""
    loop = f'<span class="speed-line">{escape(t("loop_note", lang))}</span>' \
        if plain is not None and repeating(plain.tokens) else ""
    if second is None or tree:
        speed = speed_html(plain, spec, lang, measured, speedups[0] if speedups else None)
        speed += tree_speed_html(plain, spec, second, lang, speedups) if tree else ""
    else:
        speed = lanes_speed_html(plain, list(zip(lanes, lane_costs)), lang, speedups)
    return f'<div class="verdict {tone}" role="status">{head}<div class="verdict-body">{body}{speed}{loop}</div></div>'


def headline_html(verdict, spec, ratios, lang="English", skipped=""):
    """The verdict's first line, in large type: the median speed-up with its range over the races run,
    tokens per main-model pass, and whether the text was identical (of the last speculative lane)."""
    middle, lo, hi = spread(ratios)
    word = t("faster" if middle >= 1 else "slower_word", lang)
    races = t("races_range", lang, n=len(ratios), lo=lo, hi=hi) if len(ratios) > 1 else \
        t("races_one_busy" if skipped == "busy" else "races_one", lang)
    facts = [f'<span class="vh-fact">{escape(t("per_pass_fact", lang, per_pass=spec.per_round))}</span>']
    facts.append(f'<span class="vh-fact {"same" if verdict.identical else "differ"}">'
                 f'{escape(t("identical_fact" if verdict.identical else "differ_fact", lang))}</span>')
    return (f'<div class="verdict-head"><span class="vh-speed {"up" if middle >= 1 else "down"}">'
            f'{middle:.2f}× <span class="vh-word">{escape(word)}</span></span>'
            f'<span class="vh-range">{escape(races)}</span>{"".join(facts)}</div>')


def speed_html(plain, spec, lang="English", measured=None, ratios=None):
    """What explains the speed-up: the race shown in tok/s, tokens per main-model pass (which no machine
    changes), this host's cost terms (qwen.costs: a plain token's pass and the work around it, a round's
    passes and the work around them) with the speed-up they predict, and "where the time goes" drawn.
    One sentence each where needed: the races' range straddles 1.0× (this machine's noise); the prediction
    misses the measured median by more than 10% (which term differs, by how much); speculative came out slower."""
    if plain is None or spec is None or not plain.tok_s or not spec.tok_s:
        return ""
    middle, lo, hi = spread(ratios or [spec.tok_s / plain.tok_s])
    lines = [t("speedup_shown", lang, spec=spec.tok_s, plain=plain.tok_s, speedup=spec.tok_s / plain.tok_s)]
    if spec.rounds:
        lines.append(t("per_pass_line", lang, per_round=spec.per_round))
    if lo < 1 < hi:
        lines.append(t("within_noise", lang, lo=lo, hi=hi))
    figure = ""
    if measured is not None and spec.rounds:
        predicted = costs.lane_prediction(measured, spec)
        lines += cost_lines(measured, plain, spec, predicted, middle, lang)
        if middle < 1 and predicted < 1:
            r = measured.ratios(spec.rolled_back_share, spec.per_round)
            lines.append(t("why_slower", lang, per_round=spec.per_round, round=r["round"], n=verify_rows(spec),
                           verify=r["verify"]))
        figure = time_goes_html(plain, [(spec, measured)], lang)
    return "".join(f'<span class="speed-line">{escape(line)}</span>' for line in lines) + figure


def ms(seconds):
    return seconds * 1000


def cost_lines(c, plain, spec, predicted, measured, lang="English"):
    """The terms in words: a plain token, a round, the prompt's pass and what they predict; then, where the
    prediction misses the measured median by more than 10%, the term that differs (the race's own per-token or
    per-round time against the term measured on its own)."""
    m, b = spec.per_round, spec.rolled_back_share
    passes = t("round_passes_tree", lang, tree=spec.tree, rows=parse_tree(spec.tree).size) if spec.tree else \
        (t("round_passes_auto", lang, mean=spec.drafted / max(spec.rounds, 1), k=spec.k) if spec.kept is not None
         else t("round_passes", lang, k=spec.k, n=spec.k + 1)) + \
        (t("round_passes_rollback", lang) if c.rollback == "recompute" else "")
    lines = [t("cost_plain_token", lang, total=ms(c.plain_token()), step=ms(c.step), around=ms(c.plain_around)),
             t("cost_round", lang, total=ms(c.round_seconds(b, m)), passes=ms(c.passes(b)), what=passes,
               one_call=t("one_call", lang) if c.whole else "",
               around=ms(c.round_around + c.per_token * m), per_round=m, per_token=ms(c.round_seconds(b, m) / m)),
             t("cost_predict", lang, prefill=ms(c.prefill), prefill_spec=ms(c.prefill_spec), predicted=predicted,
               measured=measured)]
    reach = spec.draft_reach
    if reach:                                   # what a head pass scores: a draft vocabulary, and what it misses
        lines.insert(2, t("cost_draft_vocab", lang, **reach) +
                     (t("cost_draft_outside", lang, n=reach["outside"]) if reach["outside"] else ""))
    if measured and abs(predicted / measured - 1) > 0.10:
        lines.append(term_differs(c, plain, spec, lang))
    return [line for line in lines if line]


def term_differs(c, plain, spec, lang="English"):
    """Which term the race shown paid differently from its measurement alone, with the sizes: a plain
    token (the lane's seconds after its prompt's pass, per token) or a round (per round). "" where a term
    measured nothing (a lane of a token or two: nothing to compare)."""
    if c.plain_token() <= 0 or c.round_seconds(spec.rolled_back_share, spec.per_round) <= 0:
        return ""
    race_token = (plain.seconds - c.prefill) / max(len(plain.tokens) - 1, 1)
    race_round = (spec.seconds - c.prefill_spec) / max(spec.rounds, 1)
    model_round = c.round_seconds(spec.rolled_back_share, spec.per_round)
    token_off, round_off = race_token / c.plain_token() - 1, race_round / model_round - 1
    if abs(token_off) >= abs(round_off):
        return t("differs_token", lang, race=ms(race_token), alone=ms(c.plain_token()), off=token_off)
    return t("differs_round", lang, race=ms(race_round), alone=ms(model_round), off=round_off)


def time_goes_html(plain, lanes, lang="English"):
    """"Where the time goes", drawn: one plain token beside each speculative lane's round divided by the tokens
    it yields, its model passes stacked against the work around them, in ms on one scale; then the first chain
    lane again as it would be if a pass over k+1 tokens cost one step (an assumption, labelled so: a GPU, or a
    model whose weights outrun the cache), with the speed-up each row predicts for the race shown (its prompt's
    pass included, as the verdict's prediction)."""
    lanes = [(run, c) for run, c in lanes if c is not None and run is not None and run.rounds]
    if not lanes or not plain:
        return ""
    first = lanes[0][1]
    rows = [(t("tg_plain", lang), first.step, first.plain_around, None, "")]
    for run, c in lanes:
        passes, around = c.where_time_goes(run.rolled_back_share, run.per_round)["spec"]
        label = t("tg_tree", lang, tree=run.tree, m=run.per_round) if run.tree else \
            t("tg_spec", lang, k=k_label(run, lang), rollback=run.rollback, m=run.per_round)
        rows.append((label, passes, around, costs.lane_prediction(c, run), ""))
    chain = next(((run, c) for run, c in lanes if not run.tree), None)
    if chain is not None:
        run, c = chain
        flat = c.assuming_flat_verify()
        passes, around = flat.where_time_goes(run.rolled_back_share, run.per_round)["spec"]
        rows.append((t("tg_flat", lang, n=verify_rows(run)), passes, around, costs.lane_prediction(flat, run), " tg-assumed"))
    scale = max(p + a for _, p, a, _, _ in rows) or 1.0
    out = []
    for label, passes, around, x, extra in rows:
        ratio = f'<span class="tg-x">{escape(t("tg_predicts", lang, x=x))}</span>' if x is not None else ""
        out.append(f'<div class="tg-row{extra}"><span class="tg-label">{escape(label)}</span>'
                   f'<span class="tg-bar"><span class="tg-pass" style="width:{100 * passes / scale:.1f}%"></span>'
                   f'<span class="tg-around" style="width:{100 * around / scale:.1f}%"></span></span>'
                   f'<span class="tg-val">{escape(t("tg_ms", lang, ms=ms(passes + around)))}{ratio}</span></div>')
    legend = (f'<div class="tg-legend"><span class="tg-key tg-pass"></span>{escape(t("tg_passes", lang))}'
              f'<span class="tg-key tg-around"></span>{escape(t("tg_around", lang))}</div>')
    note = f'<div class="tg-note">{escape(t("tg_note", lang, n=verify_rows(chain[0])))}</div>' if chain else ""
    return (f'<div class="time-goes" role="figure" aria-label="{escape(t("tg_title", lang))}">'
            f'<div class="tg-title">{escape(t("tg_title", lang))}</div>{"".join(out)}{legend}{note}</div>')


def lanes_speed_html(plain, lanes, lang="English", speedups=None):
    """Rollbacks compared: tokens per main-model pass once (the lanes share their rounds when greedy),
    then per lane [(run, Costs or None)] its median speed-up over plain (speedups: per lane, every race's)
    and, beside it, why: how many rounds rolled back and what each did to the DeltaNet memory (recompute:
    restore the snapshot and re-run the accepted tokens; select: take the kept per-token state), with this
    host's cost of a round and the speed-up its terms predict; then where the time goes, drawn. When even the
    last lane (select) came out slower, one sentence says why."""
    if plain is None or not plain.tok_s or any(run is None or not run.tok_s for run, _ in lanes):
        return ""
    speedups = speedups or [[run.tok_s / plain.tok_s] for run, _ in lanes]
    rows = []
    if lanes[0][0].rounds:
        rows.append(f'<span class="speed-line">{escape(t("per_pass_line", lang, per_round=lanes[0][0].per_round))}'
                    '</span>')
    for (run, measured), ratios in zip(lanes, speedups):
        ratio, lo, hi = spread(ratios)
        head = t("speedup_lane", lang, rollback=run.rollback, spec=run.tok_s, plain=plain.tok_s, speedup=ratio,
                 faster=t("faster" if ratio >= 1 else "slower", lang))
        why = [t(f"lane_{run.rollback}", lang, rolled=run.rolled_back, rounds=run.rounds)] if run.rounds else []
        if measured is not None and run.rounds:
            r = measured.ratios(run.rolled_back_share, run.per_round)
            why.append(t("lane_costs", lang, round=r["round"], passes=r["passes"], around=r["around"],
                         predicted=costs.lane_prediction(measured, run)))
        rows.append(f'<span class="lane-speed" data-rollback="{escape(run.rollback)}">'
                    f'<span class="speedup {"up" if ratio >= 1 else "down"}">{escape(head)}</span>'
                    f'<span class="speed-line">{escape(("" if is_zh(lang) else " ").join(why))}</span></span>')
    run, measured = lanes[-1]                       # the cheapest rollback: if even it is slower, why
    if measured is not None and run.rounds and spread(speedups[-1])[0] < 1:
        r = measured.ratios(run.rolled_back_share, run.per_round)
        if costs.lane_prediction(measured, run) < 1:
            why = t("why_slower", lang, per_round=run.per_round, round=r["round"], n=verify_rows(run), verify=r["verify"])
            rows.append(f'<span class="speed-line">{escape(why)}</span>')
    if lanes[0][1] is not None:
        rows.append(f'<span class="speed-line">{escape(t("cost_plain_token", lang, total=ms(lanes[0][1].plain_token()), step=ms(lanes[0][1].step), around=ms(lanes[0][1].plain_around)))}</span>')
    return "".join(rows) + time_goes_html(plain, lanes, lang)


def round_cost(run):
    """A speculative lane's engine seconds per main-model pass (its rounds and the prefill)."""
    return run.seconds / (run.rounds + 1)


def tree_speed_html(plain, chain, tree, lang="English", speedups=None):
    """The tree lane against the chain lane, honestly: each one's median speed-up over plain; then, in the
    race shown, tokens per main-model pass and what a tree round costs in chain rounds on this host (their
    quotient is exactly the shown race's tree ÷ chain speed: the tree wins when its tokens per pass grow by
    more than its rounds' cost); then which one won over the races run (level within 2%)."""
    if plain is None or not plain.tok_s or chain is None or tree is None or not chain.rounds or not tree.rounds \
            or not chain.tok_s or not tree.tok_s:
        return ""
    speedups = speedups or [[chain.tok_s / plain.tok_s], [tree.tok_s / plain.tok_s]]
    chain_x, tree_x = spread(speedups[0])[0], spread(speedups[-1])[0]
    head = t("tree_vs_chain" if len(speedups[-1]) > 1 else "tree_vs_chain_one", lang, tree=tree.tree, tree_x=tree_x, k=chain.k, chain_x=chain_x, n=len(speedups[-1]))
    gain, cost = tree.per_pass / chain.per_pass, round_cost(tree) / round_cost(chain)
    why = t("tree_why", lang, tree_pass=tree.per_pass, chain_pass=chain.per_pass, gain=gain, cost=cost,
            rows=parse_tree(tree.tree).size, n=verify_rows(chain))
    winner = "level" if abs(tree_x - chain_x) <= 0.02 * chain_x else "tree" if tree_x > chain_x else "chain"
    return (f'<span class="lane-speed tree-speed" data-winner="{winner}" data-gain="{gain:.4f}" data-cost="{cost:.4f}">'
            f'<span class="speedup {"up" if tree_x >= 1 else "down"}">{escape(head)}</span>'
            f'<span class="speed-line">{escape(why)} {escape(t(f"winner_{winner}", lang))}</span></span>')


def _markup(text):
    """**x** -> <b>x</b>, *x* -> <em>x</em>, in already-escaped text (the i18n strings use both)."""
    def wrap(s, mark, tag):
        parts = s.split(mark)
        if len(parts) % 2 == 0:                 # unbalanced: leave it alone
            return s
        return "".join(f"<{tag}>{p}</{tag}>" if i % 2 else p for i, p in enumerate(parts))
    return wrap(wrap(text, "**", "b"), "*", "em")


# the replay's slow motions (x times slower) that "auto" picks from: the first that makes the race last this long
REPLAY_SLOWDOWNS = (1, 2, 5, 10, 20, 50, 100, 200, 500)
REPLAY_SECONDS = 8.0


def auto_slowdown(total):
    """How many times slower the replay plays a race whose slower lane took `total` engine seconds: the
    first of REPLAY_SLOWDOWNS that makes it last REPLAY_SECONDS (a 0.2 s race: 50x, 10 s)."""
    return next((s for s in REPLAY_SLOWDOWNS if total * s >= REPLAY_SECONDS), REPLAY_SLOWDOWNS[-1])


def _blocks(run, total, draft_share, lang):
    """A lane's passes as blocks on the time track: the prompt pass, then steps (plain) or rounds
    (speculative), a round split into draft and verify by draft_share (None: drawn whole)."""
    out = []
    for i, (start, end, n) in enumerate(run.passes):
        title = escape(t("tl_pass_title", lang, n=n, ms=(end - start) * 1000))
        if i == 0:
            parts = [("tl-prefill", start, end)]
        elif run.kind == "plain":
            parts = [("tl-step", start, end)]
        elif draft_share is None:
            parts = [("tl-round", start, end)]
        else:
            cut = start + (end - start) * draft_share
            parts = [("tl-draft", start, cut), ("tl-verify", cut, end)]
        for j, (kind, a, b) in enumerate(parts):
            label = str(n) if run.kind == "speculative" and i and j == len(parts) - 1 else ""
            out.append(f'<span class="tl-pass {kind}" style="left:{100 * a / total:.3f}%;'
                       f'width:{100 * (b - a) / total:.3f}%" title="{title}">{label}</span>')
    return "".join(out)


def _draft_share(run, measured):
    """The share of a round its drafting takes, by this host's measured costs step by step (None: unknown)."""
    if measured is None or not run.rounds:
        return None
    r = measured.ratios(run.rolled_back_share)
    return r["draft_round"] / max(r["draft_round"] + r["verify"] + r["rollback"], 1e-12)


def _ticks(total, lang="English"):
    """Time-axis ticks: about five, at a round number of milliseconds or seconds (in the page's language)."""
    step = next(s for s in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60, 120)
                if total / s <= 6)
    ticks, x = [], 0.0
    while x <= total + 1e-9:
        label = t("tl_tick_ms", lang, x=x * 1000) if total < 2 else t("tl_tick_s", lang, x=x)
        ticks.append(f'<span class="tl-tick" style="left:{100 * x / total:.3f}%">{label}</span>')
        x += step
    return "".join(ticks)


def timeline_html(plain, lanes, lang="English", measured=(), race_id=""):
    """The race as a figure: one row per lane on the shared axis of engine seconds, every main-model pass a
    block (a round's draft and verify apart where this host's costs are known: measured, per lane), with
    the tokens each round kept. It carries the replay's data (demo/static/race-replay.html plays the lanes'
    texts and a cursor over this figure): its id, the slower lane's seconds, the auto slow motion, whether
    to play at once (a race shorter than REPLAY_SECONDS: too short to watch live) and the clock's words."""
    if plain is None or not plain.passes or any(not run.passes for run in lanes):
        return '<div class="race-timeline empty"></div>'
    total = max(run.seconds for run in [plain] + lanes) or 1e-9
    rows = [(t("tl_plain", lang), _blocks(plain, total, None, lang))]
    costs_of = list(measured) + [None] * len(lanes)
    for run, m in zip(lanes, costs_of):
        if any(lane.tree for lane in lanes):            # a tree lane beside the chain: short names say which
            name = t("tl_tree", lang, tree=run.tree) if run.tree else t("tl_chain", lang, k=k_label(run, lang))
        else:
            name = t("tl_spec", lang) + (f" · {run.rollback}" if len(lanes) > 1 else "")
        rows.append((name, _blocks(run, total, _draft_share(run, m), lang)))
    body = "".join(f'<div class="tl-row"><span class="tl-label">{escape(name)}</span>'
                   f'<div class="tl-track">{blocks}<span class="tl-cursor"></span></div></div>' for name, blocks in rows)
    split = any(_draft_share(run, m) is not None for run, m in zip(lanes, costs_of))
    kinds = ["tl-prefill", "tl-step"] + (["tl-draft", "tl-verify"] if split else ["tl-round"])
    legend = "".join(f'<span><span class="tl-swatch {k}"></span>{escape(t(k.replace("-", "_"), lang))}</span>'
                     for k in kinds)
    note = f'<span class="tl-note">{escape(t("tl_split", lang))}</span>' if split else ""
    data = (f'data-replay="{escape(race_id)}" data-total="{total:.4f}" data-slowdown="{auto_slowdown(total)}" '
            f'data-autoplay="{"1" if auto_slowdown(total) > 1 else "0"}" data-clock="{escape(t("replay_clock", lang))}" '
            f'data-live="{escape(t("replay_live", lang, total=f"{total:.2f}"))}"')
    return (f'<div class="race-timeline" {data}><div class="tl-head"><b>{escape(t("tl_title", lang))}</b>'
            f'<span class="tl-clock" aria-live="off"></span></div>{body}'
            f'<div class="tl-row tl-axis-row"><span class="tl-label"></span><div class="tl-axis">{_ticks(total, lang)}</div>'
            f'</div><div class="tl-legend">{legend}{note}</div></div>')
