"""Compression with measured quality.

eval.py (numpy only): perplexity of the float model and of the exact
quantized reference.  prune.py, distill.py, pipeline.py, torch_io.py need
torch (`pip install -e '.[train]'`) and are imported only by `compress`.
"""
