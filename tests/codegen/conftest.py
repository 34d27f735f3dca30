"""tests/codegen fixtures. Triton: on a machine without CUDA the Triton backend runs CPU tensors in Triton's
interpreter, which Triton picks per process when it is first imported; set it here, before any test module
imports triton. (With CUDA, Triton compiles, and the GPU tests cover the Triton backend.)"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
