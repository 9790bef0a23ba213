"""What the GPU tests share: why they cannot run here, and a generated checkpoint with its tensors loaded by
``safetensors.torch`` as the reference. Imports PyTorch only when asked."""

import os
import tempfile

from engram_host import _cuda
from support import generate, java_app_reason


def torch_reason(dtypes: tuple = ()) -> str:
    """Why a GPU test with PyTorch cannot run here ("" when it can): no CUDA, no torch or safetensors, a torch
    without one of ``dtypes`` (names of ``torch`` attributes), or no daemon to start."""
    if not _cuda.available():
        return f"no CUDA: {_cuda.unavailable_reason()}"
    try:
        import torch
        import safetensors.torch  # noqa: F401
    except ImportError as e:
        return f"needs torch and safetensors: {e}"
    if not torch.cuda.is_available():
        return "torch sees no GPU"
    for name in dtypes:
        if not hasattr(torch, name):
            return f"torch {torch.__version__} has no {name}"
    return java_app_reason() or ""


def reference_checkpoint(prefix: str, rows: int, layers: str = "1,14"):
    """``(work, checkpoint, tensors, files)``: a new temporary directory, ``engram-host generate`` into it, every
    tensor of its .safetensors files by ``safetensors.torch.load_file``, and each tensor's file."""
    import safetensors.torch
    work = tempfile.mkdtemp(prefix=prefix)
    ckpt = generate(os.path.join(work, "ckpt"), rows=rows, layers=layers)
    tensors, files = {}, {}
    for f in sorted(os.listdir(ckpt)):
        if f.endswith(".safetensors"):
            loaded = safetensors.torch.load_file(os.path.join(ckpt, f))
            tensors.update(loaded)
            files.update({n: os.path.join(ckpt, f) for n in loaded})
    return work, ckpt, tensors, files
