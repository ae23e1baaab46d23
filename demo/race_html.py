"""The race as HTML: each lane's text box (tokens marked by origin: demo.tokens), stats, verdict.

    spec_text_html(["Hel", "lo", "!"], ["main", "draft", "bonus"])
    -> '<div class="race-text"><span class="tok tok-main">Hel</span><span class="tok tok-draft" ...>lo</span>...'
"""
from html import escape

from demo import costs
from demo.i18n import is_zh, t
from demo.tokens import text_html, token_spans


def _text_box(inner, running=False, ended="", lang="English", extra_class=""):
    cursor = '<span class="cursor">▍</span>' if running else ""
    end = f'<span class="end-mark" title="{escape(t("ended_stop", lang))}">⏎</span>' if ended == "stop" else ""
    return f'<div class="race-text{extra_class}">{inner}{cursor}{end}</div>'


def waiting_html(lang="English"):
    return f'<div class="race-text empty">{escape(t("waiting", lang))}</div>'


def lane_off_html(lang="English"):
    """The third lane's text when the race does not run it (rollback is not "both")."""
    return f'<div class="race-text empty">{escape(t("lane_off", lang))}</div>'


def plain_text_html(run, lang="English"):
    """The plain run's text, escaped; a blinking cursor while it runs, ⏎ when it reached a stop token."""
    if not run.started:
        return waiting_html(lang)
    return _text_box(text_html(run.text), running=not run.ended, ended=run.ended, lang=lang)


def spec_text_html(run, lang="English"):
    """The speculative run's text, each token coloured and marked by where it came from."""
    if not run.started:
        return waiting_html(lang)
    return _text_box(token_spans(run.pieces, run.origins, lang), running=not run.ended, ended=run.ended, lang=lang)


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
                  f'<span class="ended">{escape(t("spec_setup", lang, k=run.k, rollback=run.rollback))}</span>']
    if run.ended:
        why = {"stop": t("ended_stop", lang), "length": t("ended_length", lang),
               "time": t("ended_time", lang, seconds=max_seconds)}[run.ended]
        parts.append(f'<span class="ended">{escape(why)}</span>')
    return f'<div class="race-stats">{"".join(parts)}</div>'


def verdict_html(verdict, plain=None, spec=None, lang="English", measured=None, select=None, select_costs=None):
    """The verdict in words, then the speed-up with what explains it (speed_html); with a third lane
    (`select`, rollback "both"), each speculative lane's speed-up and why (lanes_speed_html)."""
    if verdict is None:
        return '<div class="verdict"></div>'
    tone = "ok" if verdict.key in ("verdict_identical", "verdict_identical_all", "verdict_prefix",
                                   "verdict_shared_noise", "verdict_shared_noise_all") else (
        "bad" if verdict.key in ("verdict_diverged", "verdict_diverged_lane") else "info")
    # markup first, then the (escaped) values: model text may hold "*" or "<"
    params = {k: escape(v) if isinstance(v, str) else v for k, v in verdict.params.items()}
    body = _markup(escape(t(verdict.key, lang))).format(**params)
    speed = speed_html(plain, spec, lang, measured) if select is None else \
        lanes_speed_html(plain, [(spec, measured), (select, select_costs)], lang)
    return f'<div class="verdict {tone}" role="status">{body}{speed}</div>'


def speed_html(plain, spec, lang="English", measured=None):
    """The measured speed-up, tokens per main-model pass (which no machine changes), this host's costs
    of a round in plain steps (demo.costs) and the speed-up they predict; when speculative came out
    slower, one sentence says why in those numbers."""
    if plain is None or spec is None or not plain.tok_s or not spec.tok_s:
        return ""
    ratio = spec.tok_s / plain.tok_s
    head = t("speedup", lang, spec=spec.tok_s, plain=plain.tok_s, speedup=ratio,
             faster=t("faster" if ratio >= 1 else "slower", lang))
    lines = [f'<span class="speedup {"up" if ratio >= 1 else "down"}">{escape(head)}</span>']
    if spec.rounds:
        lines.append(escape(t("per_pass_line", lang, per_round=spec.per_round)))
    if measured is not None and spec.rounds:
        share = spec.rolled_back_share
        r = measured.ratios(share)
        predicted = costs.predict(measured, spec.per_round, share)
        extra = t("costs_rollback", lang, rollback=r["rollback"]) if r["rollback"] >= 0.005 else ""
        n = spec.k + 1
        line = "costs_line_whole" if measured.whole else "costs_line"      # a round as one call, or step by step
        lines.append(escape(t(line, lang, n=n, k=spec.k, verify=r["verify"], draft=r["draft"], rollback=extra,
                              round=r["round"], predicted=predicted)))
        if ratio < 1 and predicted < 1:
            lines.append(escape(t("why_slower", lang, per_round=spec.per_round, round=r["round"], n=n,
                                  verify=r["verify"])))
        elif ratio < 0.9 * predicted:
            lines.append(escape(t("why_noise", lang, predicted=predicted)))
    return "".join(f'<span class="speed-line">{line}</span>' if i else line for i, line in enumerate(lines))


def lanes_speed_html(plain, lanes, lang="English"):
    """Rollbacks compared: tokens per main-model pass once (the lanes share their rounds when greedy),
    then per lane [(run, Costs or None)] its speed-up over plain and, beside it, why: how many rounds
    rolled back and what each did to the DeltaNet memory (recompute: restore the snapshot and re-run the
    accepted tokens; select: take the kept per-token state), with this host's cost of a round. When even
    the last lane (select) came out slower, one sentence says why, as speed_html does."""
    if plain is None or not plain.tok_s or any(run is None or not run.tok_s for run, _ in lanes):
        return ""
    rows = []
    if lanes[0][0].rounds:
        rows.append(f'<span class="speed-line">{escape(t("per_pass_line", lang, per_round=lanes[0][0].per_round))}'
                    '</span>')
    for run, measured in lanes:
        ratio = run.tok_s / plain.tok_s
        head = t("speedup_lane", lang, rollback=run.rollback, spec=run.tok_s, plain=plain.tok_s, speedup=ratio,
                 faster=t("faster" if ratio >= 1 else "slower", lang))
        why = [t(f"lane_{run.rollback}", lang, rolled=run.rolled_back, rounds=run.rounds)] if run.rounds else []
        if measured is not None and run.rounds:
            r = measured.ratios(run.rolled_back_share)
            why.append(t("lane_costs_whole" if measured.whole else "lane_costs", lang, round=r["round"],
                         verify=r["verify"], draft=r["draft_round"],
                         rollback=r["rollback"], predicted=costs.predict(measured, run.per_round,
                                                                         run.rolled_back_share)))
        rows.append(f'<span class="lane-speed" data-rollback="{escape(run.rollback)}">'
                    f'<span class="speedup {"up" if ratio >= 1 else "down"}">{escape(head)}</span>'
                    f'<span class="speed-line">{escape(("" if is_zh(lang) else " ").join(why))}</span></span>')
    run, measured = lanes[-1]                       # the cheapest rollback: if even it is slower, why
    if measured is not None and run.rounds and run.tok_s < plain.tok_s:
        r = measured.ratios(run.rolled_back_share)
        if costs.predict(measured, run.per_round, run.rolled_back_share) < 1:
            why = t("why_slower", lang, per_round=run.per_round, round=r["round"], n=run.k + 1, verify=r["verify"])
            rows.append(f'<span class="speed-line">{escape(why)}</span>')
    return "".join(rows)


def _markup(text):
    """**x** -> <b>x</b>, *x* -> <em>x</em>, in already-escaped text (the i18n strings use both)."""
    def wrap(s, mark, tag):
        parts = s.split(mark)
        if len(parts) % 2 == 0:                 # unbalanced: leave it alone
            return s
        return "".join(f"<{tag}>{p}</{tag}>" if i % 2 else p for i, p in enumerate(parts))
    return wrap(wrap(text, "**", "b"), "*", "em")
