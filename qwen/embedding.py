"""Token embedding: a table of vocab_size rows of hidden_size numbers.

With tied embeddings (Qwen3.5-0.8B) the same table is the output layer: logits = hidden @ table^T.
"""
import torch.nn as nn


class Embedding(nn.Embedding):
    """nn.Embedding whose parameter is named `weight`, like the checkpoint's `embed_tokens.weight`."""

    def __init__(self, cfg):
        super().__init__(cfg.vocab_size, cfg.hidden_size)
