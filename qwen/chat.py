"""Text in, token ids out: the model's tokenizer and its own chat template.

    chat = Chat(model, path)
    chat.encode("def fib(n):")                                  # raw completion -> ids (1, T)
    chat.encode_chat([{"role": "user", "content": "Hi"}])       # the template's markup -> ids (1, T)
    chat.decode(ids), chat.stop                                 # text; ids that end a reply

The template is the Jinja text in `tokenizer_config.json`, rendered in a sandbox. A trap: user text
may contain strings such as "<|im_end|>". If the rendered prompt were tokenised as one string, that
text would become a real control token and end the user's turn early (prompt injection). So each
message's content is rendered as a placeholder, and the pieces are tokenised separately: the
template's markup with special tokens, the contents as plain text.
"""
import json
import os
import re
import threading

import torch

SPECIAL_STOPS = ("<|im_end|>", "<|endoftext|>")
# Fallback for folders without a chat template: the Qwen form (ChatML with an optional think block).
QWEN_TEMPLATE = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}{%- endif -%}")


def render_template(template, messages, add_generation_prompt=True, **extra):
    """The chat template rendered to a string (sandboxed Jinja: a template cannot touch the system)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(ValueError(msg))
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            **extra)


def build_prompt(messages, template=QWEN_TEMPLATE, **extra):
    """The prompt as text, for display. messages: [{"role": "user", "content": "..."}]"""
    return render_template(template, messages, **extra)


class Chat:
    def __init__(self, model, path):
        from tokenizers import Tokenizer
        file = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(file):
            raise FileNotFoundError(f"{file}: the model folder has no tokenizer.json")
        self.tk = Tokenizer.from_file(file)
        self._mode = threading.Lock()       # encode_special_tokens is a switch on the shared tokenizer
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
        self.supports_thinking = "enable_thinking" in self.template
        self.stop = self._stop_ids(path, config)
        self.device = next(model.parameters()).device if model is not None else "cpu"

    def _stop_ids(self, path, config):
        ids = {self.tk.token_to_id(s) for s in SPECIAL_STOPS}
        eos = config.get("eos_token")
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
        with self._mode:                    # subtle: two visitors must not see each other's setting
            self.tk.encode_special_tokens = not special
            try:
                return self.tk.encode(text, add_special_tokens=False).ids
            finally:
                self.tk.encode_special_tokens = False

    def encode(self, text):
        """Raw text -> ids (1, T); special-token strings in it are plain text."""
        return torch.tensor([self.ids_of(text)], dtype=torch.long, device=self.device)

    def build_prompt(self, messages, add_generation_prompt=True, enable_thinking=None):
        extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        return render_template(self.template, messages, add_generation_prompt, **extra)

    def encode_chat(self, messages, add_generation_prompt=True, enable_thinking=None):
        """Messages -> ids (1, T) through the model's chat template; only the markup is special tokens."""
        marks = [f"\x00{i}\x00" for i in range(len(messages))]
        masked = [{**m, "content": mark} for m, mark in zip(messages, marks)]
        text = self.build_prompt(masked, add_generation_prompt, enable_thinking)
        ids = []
        for piece in re.split("(\x00\\d+\x00)", text):
            if piece in marks:
                ids += self.ids_of(str(messages[marks.index(piece)]["content"]))
            elif piece:
                ids += self.ids_of(piece, special=True)
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def decode(self, ids, skip_special=False):
        ids = ids.tolist() if torch.is_tensor(ids) else list(ids)
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return self.tk.decode(ids, skip_special_tokens=skip_special)
