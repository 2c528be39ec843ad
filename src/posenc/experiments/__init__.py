"""Experiments the book runs and reports (chapter 9 on). They need PyTorch and tqdm.

- :mod:`posenc.experiments.model` — a small causal language model whose attention
  takes the positional method as a parameter: none (NoPE), sinusoidal, learned,
  RoPE, ALiBi or T5 buckets.
- :mod:`posenc.experiments.length_generalization` — train at short lengths, evaluate
  at longer ones: ``python -m posenc.experiments.length_generalization``.
"""
