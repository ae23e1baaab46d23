"""The race as HTML: generated text (speculative tokens coloured by origin), stats, legend, verdict.

Every piece of model or user text is escaped. Token pieces come from race.Detokenizer, so they hold
whole characters only. A token's origin is shown by colour AND by a mark that needs no colour:

    main        first token, from the prompt pass         plain
    draft       accepted draft token                      underlined, sky blue
    correction  main model's token for a rejected draft   dashed box, vermillion
    bonus       extra token when every draft was right    bold, bluish green

    spec_text_html(["Hel", "lo", "!"], ["main", "draft", "bonus"])
    -> '<div class="race-text"><span class="tok tok-main">Hel</span><span class="tok tok-draft" ...>lo</span>...'
"""
from html import escape

from demo import costs
from demo.i18n import t

ORIGINS = ("main", "draft", "correction", "bonus")


def _text(piece):
    """Escaped text; each line break gets a faint ↵ so that newline-only tokens can be seen."""
    return escape(piece).replace("\n", '<span class="nl" aria-hidden="true">↵</span>\n')


def _text_box(inner, running=False, ended="", lang="English", extra_class=""):
    cursor = '<span class="cursor">▍</span>' if running else ""
    end = f'<span class="end-mark" title="{escape(t("ended_stop", lang))}">⏎</span>' if ended == "stop" else ""
    return f'<div class="race-text{extra_class}">{inner}{cursor}{end}</div>'


def waiting_html(lang="English"):
    return f'<div class="race-text empty">{escape(t("waiting", lang))}</div>'


def plain_text_html(run, lang="English"):
    """The plain run's text, escaped; a blinking cursor while it runs, ⏎ when it reached a stop token."""
    if not run.started:
        return waiting_html(lang)
    return _text_box(_text(run.text), running=not run.ended, ended=run.ended, lang=lang)


def token_spans(pieces, origins, lang="English"):
    """One <span> per token with text, classed by origin (tokens that completed no character are skipped)."""
    titles = {o: escape(t(f"origin_{o}", lang)) for o in ORIGINS}
    return "".join(f'<span class="tok tok-{o}" title="{titles.get(o, "")}">{_text(p)}</span>'
                   for p, o in zip(pieces, origins) if p)


def spec_text_html(run, lang="English"):
    """The speculative run's text, each token coloured and marked by where it came from."""
    if not run.started:
        return waiting_html(lang)
    return _text_box(token_spans(run.pieces, run.origins, lang), running=not run.ended, ended=run.ended, lang=lang)


def legend_html(lang="English"):
    sample = escape(t("legend_sample", lang))
    items = "".join(f'<span><span class="tok tok-{o}">{sample}</span> '
                    f'{escape(t(f"origin_{o}", lang))}</span>' for o in ORIGINS)
    return f'<div class="legend" aria-label="{escape(t("legend", lang))}">{items}</div>'


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


def verdict_html(verdict, plain=None, spec=None, lang="English", measured=None):
    """The verdict in words, then the speed-up with what explains it (speed_html)."""
    if verdict is None:
        return '<div class="verdict"></div>'
    tone = "ok" if verdict.key in ("verdict_identical", "verdict_prefix") else (
        "bad" if verdict.key == "verdict_diverged" else "info")
    # markup first, then the (escaped) values: model text may hold "*" or "<"
    params = {k: escape(v) if isinstance(v, str) else v for k, v in verdict.params.items()}
    body = _markup(escape(t(verdict.key, lang))).format(**params)
    return f'<div class="verdict {tone}" role="status">{body}{speed_html(plain, spec, lang, measured)}</div>'


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
        lines.append(escape(t("costs_line", lang, n=n, verify=r["verify"], draft=r["draft"], rollback=extra,
                              round=r["round"], predicted=predicted)))
        if ratio < 1 and predicted < 1:
            lines.append(escape(t("why_slower", lang, per_round=spec.per_round, round=r["round"], n=n,
                                  verify=r["verify"])))
        elif ratio < 0.9 * predicted:
            lines.append(escape(t("why_noise", lang, predicted=predicted)))
    return "".join(f'<span class="speed-line">{line}</span>' if i else line for i, line in enumerate(lines))


def _markup(text):
    """**x** -> <b>x</b>, *x* -> <em>x</em>, in already-escaped text (the i18n strings use both)."""
    def wrap(s, mark, tag):
        parts = s.split(mark)
        if len(parts) % 2 == 0:                 # unbalanced: leave it alone
            return s
        return "".join(f"<{tag}>{p}</{tag}>" if i % 2 else p for i, p in enumerate(parts))
    return wrap(wrap(text, "**", "b"), "*", "em")
