"""A from-scratch, readable PyTorch engine for the Qwen3.5 hybrid text model and its MTP draft head.

Modules, in reading order: config, weights, embedding, norm, mlp, rope, attention, deltanet, chunk,
layer, model, cache, sample, chat, batch, mtp (+ trace), then the tools: train, bench, __main__.
"""
