"""The Qwen3.5 text model: embedding, the hybrid stack of decoder layers, final norm, output layer.

    model = Model.from_pretrained(find_model())
    state = State(model)
    logits = model(ids, state)          # ids (B, T) -> logits (B, T, vocab); state.pos += T
    logits = model(ids2, state)         # continues from the cache

Any T works from any state: a whole prompt, one token, or several tokens continuing from a cache (as
speculative verification needs). With `tree=` (a qwen.tree.Tree) the T tokens are a draft tree's rows, each
seeing only its ancestors; a chain-shaped tree is the plain causal pass, the same code.
"""
import torch
import torch.nn as nn

from qwen.config import read_config
from qwen.embedding import Embedding
from qwen.layer import DecoderLayer
from qwen.norm import RMSNorm
from qwen.rope import rope_tables
from qwen.tree import tree_tensor
from qwen.weights import list_tensors, load_weights, text_prefix


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg, kind) for kind in cfg.layer_types)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def run(self, ids, positions, state, tree=None):
        """The stack on ids (B, T) at positions (T,) -> last-layer output after the final norm (B, T, H).
        Reads and writes the state's buffers in place and reads no Python number from it, so the same
        code is the eager path and, traced once per T, the compiled one (qwen.compiled).
        tree: the rows' qwen.tree.Tree (batch 1), or None for a sequence. Row r writes KV slot positions[r]
        and is rotated at its depth, positions[0] + depth."""
        rope_positions, real = positions, None
        if tree is not None:
            rope_positions = positions[0] + tree_tensor(tree.depths, positions.device)
        if state.pad is not None:                             # left-padded batch: each row counts from its first token
            real = positions[None, :] >= state.pad[:, None]                           # (B, T)
            rope_positions = (positions[None, :] - state.pad[:, None]).clamp(min=0)  # (B, T)
        cos, sin = rope_tables(self.cfg, rope_positions)
        x = self.embed_tokens(ids)
        for layer, cache in zip(self.layers, state.layers):
            x = layer(x, cos, sin, cache, positions, state.pad, real, tree)
        return self.norm(x)

    def step(self, ids, positions, state):
        """run() and the output layer: -> (logits (B, T, vocab), hidden (B, T, H)). What qwen.compiled compiles."""
        hidden = self.run(ids, positions, state)
        return self.lm_head(hidden), hidden

    def hidden(self, ids, state):
        """Last-layer output after the final norm, always eager (prefill, training).
        ids: (B, T) -> (B, T, H); advances state by T."""
        positions = state.begin_pass(ids)
        hidden = self.run(ids, positions, state)
        state.end_pass(ids.shape[1])
        return hidden

    def forward_hidden(self, ids, state, last_only=False, tree=None):
        """ids: (B, T) -> (logits (B, T, vocab) or (B, 1, vocab) for the last position only, hidden (B, T, H)).
        tree: a qwen.tree.Tree whose rows ids holds (each row sees only its ancestors); a chain is None's case."""
        positions = state.begin_pass(ids)
        tree = None if tree is None or tree.is_chain() else tree
        logits, hidden = self.step_pass(ids, positions, state, last_only, tree)
        state.end_pass(ids.shape[1])
        return logits, hidden

    def step_pass(self, ids, positions, state, last_only=False, tree=None):
        """One pass of ids (B, T) at positions (T,) -> (logits (B, T or 1, vocab), hidden (B, T, H)).
        The one method a compiled view of the model (qwen.compiled) overrides: there a graph prepared
        for this T serves it (a sequence); here, the eager reference, the output layer scores only what is asked."""
        hidden = self.run(ids, positions, state, tree)
        # subtle: hidden[:, -1] (2-D), not hidden[:, -1:]: a bfloat16 Linear given a 3-D slice of a longer pass takes a
        # slow CPU path, dozens of times slower (docs/benchmarks.md, 2026-12-06, fourth session)
        return (self.lm_head(hidden[:, -1])[:, None] if last_only else self.lm_head(hidden)), hidden

    def forward(self, ids, state, last_only=False):
        """ids: (B, T) -> logits (B, T, vocab), or (B, 1, vocab) for the last position only."""
        return self.forward_hidden(ids, state, last_only)[0]

    @classmethod
    def from_pretrained(cls, path, dtype=torch.float32, device=None):
        """Load a model folder (hub layout `model.language_model.*` or text-only `model.*`), eager.
        qwen.compiled makes a compiled view of it from outside (compile_model, warm_up)."""
        cfg = read_config(path)
        names = list_tensors(path)
        prefix = text_prefix(names)
        weights = load_weights(path, part=prefix, dtype=dtype)
        if not cfg.tie_word_embeddings:
            if "lm_head.weight" not in names:
                raise ValueError(f"{path}: config says untied embeddings but there is no lm_head.weight")
            weights.update({"lm_head.weight": load_weights(path, part="lm_head.", dtype=dtype)["weight"]})
        with torch.device("meta"):
            model = cls(cfg)
        load_into(model, weights, f"{path} ({prefix}*)",
                  skip={"lm_head.weight"} if cfg.tie_word_embeddings else set())
        return model.to(device=device).eval().requires_grad_(False)


def load_into(module, weights, source, skip=()):
    """Copy checkpoint tensors into a module whose parameter names equal the checkpoint keys (except
    `skip`, e.g. a tied lm_head). Refuses a missing, unexpected or wrongly shaped tensor, naming it."""
    expected = dict(module.state_dict(keep_vars=True))
    tied = set(skip)
    missing = [n for n in expected if n not in weights and n not in tied]
    unexpected = [n for n in weights if n not in expected]
    if missing or unexpected:
        raise ValueError(f"{source}: checkpoint does not fit the config: "
                         + (f"missing {missing[:5]}{' …' if len(missing) > 5 else ''} " if missing else "")
                         + (f"unexpected {unexpected[:5]}{' …' if len(unexpected) > 5 else ''}" if unexpected else ""))
    for name, p in expected.items():
        if name in tied:
            continue
        if tuple(weights[name].shape) != tuple(p.shape):
            raise ValueError(f"{source}: tensor {name} has shape {tuple(weights[name].shape)}, "
                             f"the config expects {tuple(p.shape)}")
    module.load_state_dict({n: w for n, w in weights.items()}, strict=False, assign=True)
    if "lm_head.weight" in tied:
        module.lm_head.weight = module.embed_tokens.weight
