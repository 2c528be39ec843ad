"""Experiments the book runs and reports (chapter 9 on). They need PyTorch and tqdm.

- :mod:`posenc.experiments.model` — a small causal language model whose attention
  takes the positional method as a parameter: none (NoPE), sinusoidal, learned,
  RoPE (at any positions), ALiBi or T5 buckets.
- :mod:`posenc.experiments.length_generalization` — three tasks, seven arms, train at
  one length until the task is learned, evaluate at longer ones:
  ``python -m posenc.experiments.length_generalization --jobs 2`` (resumable).
- :mod:`posenc.experiments.long_context` — chapter 9's RoPE models stretched to
  longer inputs with scaled frequencies, zero-shot and after a short fine-tune:
  ``python -m posenc.experiments.long_context --jobs 2`` (resumable).
- :mod:`posenc.experiments.grid` — tokens on a grid, the target the token above: train
  at 8 x 8, test at 8 x 8, 12 x 12 and 16 x 16 with RoPE over the raster order (with
  or without a row-separator token), axial RoPE over (row, col), or 2-D sincos
  (extrapolated or interpolated): ``python -m posenc.experiments.grid --jobs 2``
  (resumable).
- :mod:`posenc.experiments.flipflop` — chapter 26's one-head flip-flop task: FoX, ALiBi
  and NoPE heads trained at one length and tested with the last write a set distance
  back (runs inside the chapter, no data file).
- :mod:`posenc.experiments.analysis` — bootstrap intervals over seeds, windowed
  accuracy, accuracy steps, and RoPE's predicted lag aliases (NumPy only).
"""
