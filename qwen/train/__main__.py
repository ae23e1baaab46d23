"""`python -m qwen.train`: train the embedded demo model and its MTP head (qwen/train/loop.py)."""
from qwen.train.loop import main

main()
