"""The training pipeline that built the embedded demo checkpoint under assets/: not part of the engine.

    apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv       # the corpus's sources, offline
    python -m qwen.train.corpus --out data/corpus                                   # documents, train / held-out
    python -m qwen.train.bpe --corpus data/corpus --out data/tok                    # the tokenizer
    python -m qwen.train --corpus data/corpus --tokenizer data/tok --out assets     # the model and its MTP head
    python -m qwen.train.distill --corpus data/corpus --checkpoint assets           # the head, taught by the model
    python -m qwen.train.draft_vocab --corpus data/corpus --checkpoint assets       # the draft's 2048 tokens

In reading order: sources.py (the Debian sources, the Doc record, chat documents), pydocs.py, poetry.py and kjv.py
(one reader per source), corpus.py (assembly, split, files), bpe.py (the tokenizer), loop.py (the training loop),
export.py (the hub layout), distill.py (the head taught the main model's own guesses), draft_vocab.py (the tokens
the draft is scored over). The pipeline imports the engine (the model, the MTP head, the chat template); the engine
imports nothing from here.
"""
