"""The reference engine (docs/reference.md): what DeepSeek-V4.1's Engram layer does with the tables each step,
run as an engine that restarts. Given a step's hashed row ids it gathers ``embed.weight`` and ``embed.scale`` rows,
dequantises them to BF16 (one E8M0 scale per 32 values) and applies the layer's ``wkv`` projection from the
checkpoint, for a prefill chunk (8,192 tokens x 24 rows x 2 layers) and for decode steps, and checks every lookup
bit for bit against the same computation on tables loaded from disk.

- :mod:`.spec`: the workload's definition (token streams, row ids, dequantisation, projection), standard library
  and NumPy; :mod:`.cpu`: the CPU engine over disk or served tables; :mod:`.layout`: where a model's tables are;
  :mod:`.synthetic`: a small model of finite values.
- :mod:`.gpu`: the PyTorch engine's commands (restarts, ranks, timings), over :mod:`.gpu_ops` (GPU hashing,
  gather, dequantisation and projection), :mod:`.gpu_tables` (served, disk-loaded and self-loaded tables) and
  :mod:`.gpu_workload` (the lookups run, compared and timed). They are imported only by the commands, so
  ``import engram_host.reference`` needs neither PyTorch nor NumPy.

``python -m engram_host.reference --help`` lists the commands.
"""

from . import spec

__all__ = ["spec"]
