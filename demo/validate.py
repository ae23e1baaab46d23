"""Untrusted input made safe before it reaches the engine: prompts, numbers, choices, deep links.

Everything a visitor (or a script through the API) sends passes through here. Nothing raises for a
bad number: it is clamped or replaced by the default, and a Notice says so. Only a prompt with no
text left is refused (InputError). Notices are (key, params) pairs that demo.i18n turns into words:

    clean_prompt("  ")                    -> InputError("empty_prompt")
    clean_prompt("a\x00b\u202ec\ud800")   -> ("abc", [Notice("removed_chars", {"n": 3})])
    clamp_number("3", 1, 4, 2, "k")       -> (3, [])
    clamp_number(99, 1, 4, 2, "k")        -> (4, [Notice("clamped", {"name": "k", "value": 99, ...})])
    clamp_number(2.6, 1, 4, 2, "k")       -> (3, [Notice("rounded", ...)])
    clamp_number(float("nan"), ...)       -> (2, [Notice("not_a_number", ...)])

Special-token strings such as "<|im_end|>" are left in the text on purpose: the engine's Chat
tokenises user text with special tokens off, so they stay plain characters (no prompt injection).

What a visitor may choose (every number's range, the rollbacks, rules, tree shapes) is demo.choices.
"""
import math
import re
import unicodedata
from dataclasses import dataclass, field

from demo.choices import AUTO, AUTO_MAX_K, BOTH, LIMITS, RACE_ROLLBACKS, RULES, TREES

MAX_PROMPT_CHARS = 100_000      # cut (keeping the end) before tokenising; the token budget cuts further
KEEP_CONTROLS = {"\n", "\t"}
# bidi embeddings / overrides / isolates: they can reorder what the page shows around them
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
SURROGATES = re.compile("[\ud800-\udfff]")


class InputError(ValueError):
    """Input that cannot be used at all. `key` names the i18n message; str() is the English text."""

    def __init__(self, key, message, **params):
        super().__init__(message)
        self.key, self.params = key, params


@dataclass(frozen=True)
class Notice:
    key: str                    # an i18n key, e.g. "clamped"
    params: dict = field(default_factory=dict)


def clean_prompt(text, max_chars=MAX_PROMPT_CHARS):
    """A prompt safe to tokenise. -> (text, [Notice]); raises InputError when nothing usable is left.

    Pairs of UTF-16 surrogates become the character they encode; lone surrogates, control characters
    (except newline and tab) and bidi overrides are removed; Windows line ends become "\\n"; emoji,
    right-to-left scripts and special-token strings stay as they are."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        text = str(text)
    notices = []
    if len(text) > 2 * max_chars:           # cheap first cut, so a pasted book costs no more than 2 x max_chars
        notices.append(Notice("truncated_chars", {"n": len(text), "kept": max_chars}))
        text = text[-2 * max_chars:]
    # subtle: a str can hold "\ud83d\ude00" as two code points (JSON with separate escapes); join them
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    before = len(text)
    text = SURROGATES.sub("", text)
    text = BIDI_CONTROLS.sub("", text)
    text = "".join(c for c in text if c in KEEP_CONTROLS or unicodedata.category(c) != "Cc")
    if len(text) < before:
        notices.append(Notice("removed_chars", {"n": before - len(text)}))
    if not text.strip():
        raise InputError("empty_prompt", "The prompt is empty: type some text first.")
    if len(text) > max_chars:
        if not any(n.key == "truncated_chars" for n in notices):
            notices.append(Notice("truncated_chars", {"n": len(text), "kept": max_chars}))
        text = text[-max_chars:]
    return text, notices


def to_number(value):
    """float(value) for numbers and numeric strings; None for anything else, NaN and infinities."""
    if isinstance(value, bool):
        return float(value)
    try:
        x = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def clamp_number(value, lo, hi, default, name, integer=True):
    """`value` as a number in [lo, hi]. -> (number, [Notice]). Unreadable -> default; outside -> nearest end."""
    x = to_number(value)
    if x is None:
        return default, [Notice("not_a_number", {"name": name, "value": str(value)[:40], "default": default})]
    y = min(max(x, lo), hi)
    if integer:
        y = int(round(y))
    if y == x:
        return y, []
    if lo <= x <= hi:                       # in range, not a whole number
        return y, [Notice("rounded", {"name": name, "value": str(value)[:40], "used": y})]
    return y, [Notice("clamped", {"name": name, "value": str(value)[:40], "lo": lo, "hi": hi, "used": y})]


def choose(value, options, default, name):
    """`value` if it is one of `options`, else the default with a Notice."""
    if value in options:
        return value, []
    return default, [Notice("bad_choice", {"name": name, "value": str(value)[:40], "default": default})]


def as_bool(value):
    """True for True, 1, "true", "yes", "on", "1" (any case); False otherwise."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value) if isinstance(value, (bool, int, float)) and value == value else False


@dataclass
class RaceSettings:
    prompt: str
    max_new_tokens: int
    k: int
    rollback: str               # one of RACE_ROLLBACKS ("both": a recompute lane and a select lane)
    temperature: float
    seed: int
    raw: bool
    thinking: bool
    notices: list
    rule: str = "shared"        # sampling's rule: one of RULES
    tree: str = ""              # one of TREES: a third lane drafting a tree of that shape ("": none)
    auto: bool = False          # k="auto": each round drafts 0..k (k = AUTO_MAX_K), as far as it pays


def clamp_all(values, limits=LIMITS):
    """Each named value clamped by clamp_number to its limits (temperature stays a float, the rest are
    whole numbers). values: {name: value as sent}. -> ({name: number}, [Notice])"""
    numbers, notices = {}, []
    for name, value in values.items():
        lo, hi, default = limits[name]
        numbers[name], more = clamp_number(value, lo, hi, default, name, integer=name != "temperature")
        notices += more
    return numbers, notices


def race_settings(prompt, max_new_tokens=120, k=2, rollback="select", temperature=0.0, seed=0, *, raw=False,
                  thinking=False, rule="shared", tree=""):
    """Every race input checked at once. -> RaceSettings; raises InputError only for an unusable prompt.
    A tree lane takes the third lane (rollback "both" becomes "select") and samples with shared noise (a
    tree has no rejection rule here), each change with a Notice. k="auto": the chain lanes choose each
    round's length, up to AUTO_MAX_K (settings.auto; settings.k is then that longest draft)."""
    text, notices = clean_prompt(prompt)
    auto = isinstance(k, str) and k.strip().lower() == AUTO
    k = AUTO_MAX_K if auto else k
    numbers, more = clamp_all({"max_new_tokens": max_new_tokens, "k": k, "temperature": temperature, "seed": seed})
    notices += more
    rollback, more = choose(rollback, RACE_ROLLBACKS, "select", "rollback")
    notices += more
    rule, more = choose(rule, RULES, "shared", "rule")
    notices += more
    tree, more = choose("" if tree is None else str(tree).strip(), TREES, "", "tree")
    notices += more
    if tree and rollback == BOTH:
        rollback = "select"
        notices.append(Notice("tree_takes_third_lane", {"tree": tree}))
    if tree and rule == "rejection" and numbers["temperature"]:
        rule = "shared"
        notices.append(Notice("tree_shared_noise", {"tree": tree}))
    return RaceSettings(text, numbers["max_new_tokens"], numbers["k"], rollback, float(numbers["temperature"]),
                        numbers["seed"], as_bool(raw), as_bool(thinking), notices, rule, tree, auto)


def fit_prompt(text, count, text_ids, ids_text, budget):
    """Keep the end of `text` so that the whole prompt has at most `budget` tokens. -> (text, [Notice])

    count: text -> tokens of the whole prompt (chat markup included); text_ids / ids_text: the user
    text alone <-> its ids. The cut is made on tokens and decoded back; a character split by the cut
    (a partial UTF-8 sequence, decoded as U+FFFD) is dropped."""
    total = count(text)
    if total <= budget:
        return text, []
    ids = text_ids(text)
    over = total - budget
    for extra in range(0, 32, 4):          # re-tokenising the cut text can differ by a token or two
        keep = len(ids) - over - extra
        if keep <= 0:
            break
        cut = ids_text(ids[-keep:]).lstrip("\ufffd")
        if cut.strip() and count(cut) <= budget:
            return cut, [Notice("truncated_tokens", {"n": total, "kept": count(cut)})]
    raise InputError("prompt_too_long", "The prompt does not fit the model's context.", budget=budget)


def deep_link(params):
    """Values a shared link may prefill, from its query string (a dict of str): prompt, raw, lang, presenter.
    Unknown keys are ignored; the prompt is cleaned like a typed one (empty -> not prefilled)."""
    out = {}
    try:
        out["prompt"] = clean_prompt(params.get("prompt", ""), max_chars=4000)[0]
    except InputError:
        pass
    lang = str(params.get("lang", "")).lower()
    if lang in ("zh", "zh-cn", "cn", "中文"):
        out["lang"] = "中文"
    elif lang in ("en", "english"):
        out["lang"] = "English"
    if "presenter" in params:
        out["presenter"] = as_bool(params["presenter"])
    if "raw" in params:
        out["raw"] = as_bool(params["raw"])
    return out
