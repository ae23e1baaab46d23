"""Text in, token ids out: the model's tokenizer and its own chat template.

    chat = Chat(model, path)
    chat.encode("def fib(n):")                                  # raw completion -> ids (1, T)
    chat.encode_chat([{"role": "user", "content": "Hi"}], enable_thinking=False)   # the template's prompt -> (1, T)
    chat.decode(ids), chat.stop                                 # text; ids that end a reply

The template is the Jinja text shipped with the tokenizer, rendered in a sandbox the way `transformers`'
`apply_chat_template` renders it, so the prompt is the one the model was trained on, token for token.

A trap: a message may contain strings such as "<|im_end|>". Tokenised with the rest of the prompt, such text would
become a real control token and end the user's turn early (prompt injection). Hiding the contents from the template
avoids that but breaks templates that trim the content, test it, or rewrite earlier turns. So the template sees the
real messages, and is rendered a second time with every special-token string in its inputs blanked out (the same
number of characters of one private-use character, shown here as ■):

    real     <|im_start|>user\nhi <|im_end|> there<|im_end|>\n<|im_start|>assistant\n
    blanked  <|im_start|>user\nhi ■■■■■■■■■■ there<|im_end|>\n<|im_start|>assistant\n

The real rendering is the prompt's text, character for character the reference's. A special token in it is the
template's own markup when the blanked rendering has the same token at the same place (markup_spans); every other
special-token string is encoded as plain text. A special-token string is the text of any added token of the
tokenizer, special or not (Qwen's <think> and <tool_call> are not), whitespace-only ones aside.

When no input holds a special-token string, the two renderings are one, and the ids are the reference's. subtle:
when the template reacts to such a string (a reply after the last question with its reasoning inline,
"...</think>\n\nanswer"), the stretch rendered differently keeps its special tokens as text. Pass the reasoning as
"reasoning_content" for the reference's ids there.

Streaming text out has its own trap: byte-level BPE can split one UTF-8 character (most Chinese ones) over two or
three tokens, so decoding token by token shows U+FFFD halves. A Detokenizer holds such tokens back until their
character is complete.
"""
import json
import os
import re
from datetime import datetime
from functools import lru_cache

import torch
from jinja2 import ext, nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_STOPS = ("<|im_end|>", "<|endoftext|>")
# The Qwen form of chat template (ChatML turns, a think block, no tools): the embedded checkpoint's, which the training
# pipeline writes into tokenizer_config.json (qwen/train/bpe.py), and the fallback for folders without a template.
# The assistant turns after the last user message carry a think block (empty when there is no reasoning); earlier
# ones are plain. The generation prompt opens the assistant turn with "<think>\n", or with an empty think block
# when enable_thinking is false.
QWEN_TEMPLATE = r"""{%- set ns = namespace(last_query_index=-1) -%}
{%- for message in messages -%}
    {%- if message.role == 'user' -%}{%- set ns.last_query_index = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = message.content if message.content is string else '' -%}
    {%- if message.role == 'assistant' -%}
        {%- set reasoning_content = '' -%}
        {%- if message.reasoning_content is string -%}
            {%- set reasoning_content = message.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        {%- if loop.index0 > ns.last_query_index -%}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
        {%- else -%}
            {{- '<|im_start|>assistant\n' + content -}}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- else -%}
        {{- '<think>\n' -}}
    {%- endif -%}
{%- endif -%}"""
# The tokenizer's named special tokens, which templates read as variables ("{{ bos_token }}").
NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Names a message's reasoning comes under; templates read "reasoning_content" (gpt-oss style ones "thinking").
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


class TemplateRefused(ValueError):
    """The chat template's own `raise_exception(...)`: the conversation is not one this template accepts."""


class _Generation(ext.Extension):
    """`{% generation %}...{% endgeneration %}` (marks a reply for training masks): rendered as its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _refuse(message):
    raise TemplateRefused(f"the chat template refused this conversation: {message}")


def compile_template(template):
    """The Jinja template compiled as transformers compiles chat templates: sandboxed (a template cannot touch the
    system), trim_blocks and lstrip_blocks, loop controls, a `tojson` that keeps non-ASCII text and '<' as they are,
    `raise_exception` and `strftime_now`."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[ext.loopcontrols, _Generation])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = _refuse
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def plain_messages(messages):
    """Messages as the template sees them: keys whose value is None dropped (a missing key renders better than
    "None"), and reasoning given under any of REASONING_KEYS offered under all of them. As transformers does."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError(f"a chat message must be a dict such as {{'role': 'user', 'content': '...'}}, not {m!r}")
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in REASONING_KEYS if k in m), None)
        out.append(m if reasoning is None else {"thinking": reasoning, **m, "reasoning_content": reasoning})
    return out


def blank_specials(value, specials, blank):
    """Every special-token string in `value` (a string, or dicts / lists of them; keys kept) replaced by as many
    `blank` characters: "hi <|im_end|>" -> "hi ■■■■■■■■■■". Same lengths, so `|length` and slicing agree."""
    if isinstance(value, str):
        return alternation(specials).sub(lambda m: blank * len(m.group()), value)
    if isinstance(value, dict):
        return {k: blank_specials(v, specials, blank) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(blank_specials(v, specials, blank) for v in value)
    return value


def unused_char(value):
    """A private-use character that occurs in no string of `value` (so a blank is never mistaken for text)."""
    seen = set(json.dumps(value, ensure_ascii=False, default=str))
    return next(c for c in map(chr, range(0xE000, 0xF900)) if c not in seen)


@lru_cache(maxsize=16)
def alternation(strings):
    """A regex matching any of `strings`, leftmost then longest first (as a tokenizer splits out added tokens)."""
    return re.compile("|".join(map(re.escape, sorted(strings, key=len, reverse=True))) or "(?!)")


def agreeing_prefix(real, blanked, specials, blank):
    """Length of the longest prefix over which `blanked` is `real` with some special-token strings blanked.
        ("a<|im_end|>b<|x|>", "a■■■■■■■■■■b<|y|>") -> 14"""
    found, i, n = alternation(specials), 0, min(len(real), len(blanked))
    while i < n:
        if real[i] == blanked[i]:
            i += 1
        elif blanked[i] == blank and (m := found.match(real, i)) and blanked[i:m.end()] == blank * len(m.group()):
            i = m.end()
        else:
            break
    return i


def markup_spans(real, blanked, specials, blank):
    """(start, end) of each special-token string in `real` that the template wrote itself.

    The two renderings agree (up to blanked special-token strings) over a common head and a common tail: all of
    them when the template did not react to the blanked strings. Inside those, a special token of `real` is markup
    when `blanked` has the same token at the same place: the template wrote it with no special-token string in its
    inputs. In the middle, where the template rendered differently (it split a "</think>" out of a reply, say),
    nothing is markup: those tokens stay text, which can cost exactness but never lets text become a control token.
        ("a<|im_end|>b<|im_end|>", "a■■■■■■■■■■b<|im_end|>") -> [(12, 22)]
    """
    head = agreeing_prefix(real, blanked, specials, blank)
    backwards = tuple(t[::-1] for t in specials)
    tail = min(agreeing_prefix(real[::-1], blanked[::-1], backwards, blank), min(len(real), len(blanked)) - head)
    shift = len(blanked) - len(real)                                    # in the tail, real i <-> blanked i + shift
    spans = []
    for m in alternation(specials).finditer(real):
        s, e = m.span()
        if e <= head and blanked[s:e] == m.group() or \
                s >= len(real) - tail and blanked[s + shift:e + shift] == m.group():
            spans.append((s, e))
    return spans


def _is_control(content):
    """Whether an added token's string is a control token, which text must never produce: all of them but those
    made of whitespace (some tokenizers add runs of spaces or newlines as tokens; they are text)."""
    return not content.isspace()


def _special_value(value):
    """A named special token from tokenizer_config.json: "<|im_end|>" or {"content": "<|im_end|>", ...}."""
    return value.get("content") if isinstance(value, dict) else value


class Chat:
    """A model folder's tokenizer and chat template: text or messages -> ids (1, T), ids -> text; `stop` ids."""

    def __init__(self, model, path):
        from tokenizers import Tokenizer
        file = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(file):
            raise FileNotFoundError(f"{file}: the model folder has no tokenizer.json")
        self.tk = Tokenizer.from_file(file)             # added tokens in text become their ids (for markup)
        self._text_tk = self._text_only(self.tk)        # never makes an added token: for text that must stay text
        self.model = model
        config = {}
        cfg_file = os.path.join(path, "tokenizer_config.json")
        if os.path.isfile(cfg_file):
            with open(cfg_file, encoding="utf-8") as f:
                config = json.load(f)
        template = config.get("chat_template")
        jinja = os.path.join(path, "chat_template.jinja")
        if not template and os.path.isfile(jinja):
            with open(jinja, encoding="utf-8") as f:
                template = f.read()
        self.has_template = bool(template)
        self.template = template or QWEN_TEMPLATE
        try:
            self._compiled = compile_template(self.template)
        except TemplateSyntaxError as e:
            raise ValueError(f"{path}: the chat template does not parse: {e}") from e
        self.supports_thinking = "enable_thinking" in self.template
        self.named_specials = {k: _special_value(config[k]) for k in NAMED_SPECIALS if _special_value(config.get(k))}
        added = self.tk.get_added_tokens_decoder()                          # {id: AddedToken}
        self.special_ids = {t.content: i for i, t in added.items() if _is_control(t.content)}
        self.specials = tuple(self.special_ids)
        self.stop = self._stop_ids(path, config)
        self.device = next(model.parameters()).device if model is not None else "cpu"

    @staticmethod
    def _text_only(tk):
        """A copy of the tokenizer that encodes every control token's string as ordinary text. subtle:
        `encode_special_tokens` only covers added tokens marked special, and Qwen's <tool_call>, <think>... are not,
        so the copy marks exactly the control tokens special first."""
        from tokenizers import Tokenizer
        spec = json.loads(tk.to_str())
        for t in spec.get("added_tokens", []):
            t["special"] = _is_control(t["content"])
        copy = Tokenizer.from_str(json.dumps(spec))
        copy.encode_special_tokens = True
        return copy

    def _stop_ids(self, path, config):
        ids = {self.tk.token_to_id(s) for s in SPECIAL_STOPS}
        eos = _special_value(config.get("eos_token"))
        if isinstance(eos, str):
            ids.add(self.tk.token_to_id(eos))
        gen = os.path.join(path, "generation_config.json")
        if os.path.isfile(gen):
            with open(gen, encoding="utf-8") as f:
                e = json.load(f).get("eos_token_id")
            ids.update(e if isinstance(e, list) else [e])
        return tuple(sorted(i for i in ids if i is not None))

    def ids_of(self, text, special=False):
        """Token ids of text; special-token strings stay plain text unless `special`."""
        return (self.tk if special else self._text_tk).encode(text, add_special_tokens=False).ids

    def encode(self, text):
        """Raw text -> ids (1, T); special-token strings in it are plain text."""
        return torch.tensor([self.ids_of(text)], dtype=torch.long, device=self.device)

    def _render(self, messages, add_generation_prompt, template_kwargs):
        # Template variables as transformers passes them: the named special tokens, then the caller's (which win).
        variables = {"tools": None, "documents": None, **self.named_specials, **template_kwargs}
        return self._compiled.render(variables, messages=messages, add_generation_prompt=add_generation_prompt)

    def build_prompt(self, messages, add_generation_prompt=True, **template_kwargs):
        """The prompt as text, exactly as the reference's apply_chat_template(..., tokenize=False) renders it.
        template_kwargs: e.g. enable_thinking=False, tools=[...]; None means "not passed" (the template's default).
        messages: [{"role": "user", "content": "..."}, {"role": "assistant", "content": "...",
        "reasoning_content": "..."}, ...]. Raises TemplateRefused (a ValueError) when the template refuses them."""
        kwargs = {k: v for k, v in template_kwargs.items() if v is not None}
        return self._render(plain_messages(messages), add_generation_prompt, kwargs)

    def encode_chat(self, messages, add_generation_prompt=True, **template_kwargs):
        """Messages -> ids (1, T) through the model's chat template (arguments as build_prompt). Special tokens
        come only from the template's markup; special-token strings in the messages or kwargs are text."""
        messages = plain_messages(messages)
        kwargs = {k: v for k, v in template_kwargs.items() if v is not None}
        real = self._render(messages, add_generation_prompt, kwargs)
        blank = unused_char([messages, kwargs, self.template])
        quiet_messages, quiet_kwargs = (blank_specials(x, self.specials, blank) for x in (messages, kwargs))
        if quiet_messages == messages and quiet_kwargs == kwargs:           # no special-token strings in the inputs:
            ids = self.ids_of(real, special=True)                           # the reference's own encoding
            return torch.tensor([ids], dtype=torch.long, device=self.device)
        try:
            blanked = self._render(quiet_messages, add_generation_prompt, quiet_kwargs)
        except TemplateRefused as e:
            raise TemplateRefused(f"{e} (this template accepts the conversation only with its special-token "
                                  "strings read as control tokens, which text must never become)") from e
        ids, start = [], 0
        for s, e in markup_spans(real, blanked, self.specials, blank):
            ids += self.ids_of(real[start:s]) + [self.special_ids[real[s:e]]]
            start = e
        ids += self.ids_of(real[start:])
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def decode(self, ids, skip_special=False):
        ids = ids.tolist() if torch.is_tensor(ids) else list(ids)
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return self.tk.decode(ids, skip_special_tokens=skip_special)


class Detokenizer:
    """Token ids in, the text each one completes out: whole characters only, nothing lost.

    Byte-level BPE can split one UTF-8 character over tokens; decoded alone, each part is U+FFFD. So the pending
    tokens are decoded together, and the whole character goes to the token that completed it:

        [好 = e5 a5 bd] tokens (b"\\xe5\\xa5", b"\\xbd!") -> push: "", "好!"

    After MAX_PENDING tokens that still end in an incomplete character, the text is shown as it is (the bytes are
    genuinely invalid, not merely unfinished).
    """
    MAX_PENDING = 8

    def __init__(self, decode):
        self.decode = decode        # list of ids -> text (invalid UTF-8 -> U+FFFD), e.g. Chat.decode
        self.pending = []           # ids whose text ends in an incomplete character so far

    def push(self, token):
        """The text `token` completes ("" while a character is still incomplete)."""
        self.pending.append(token)
        text = self.decode(self.pending)
        if text.endswith("\ufffd") and len(self.pending) < self.MAX_PENDING:
            return ""
        self.pending = []
        return text

    def flush(self):
        """Whatever is still pending (an incomplete character at the very end shows as U+FFFD)."""
        text = self.decode(self.pending) if self.pending else ""
        self.pending = []
        return text
