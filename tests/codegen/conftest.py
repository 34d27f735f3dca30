"""tests/codegen fixtures. Triton: on a machine without CUDA the Triton backend runs CPU tensors in Triton's
interpreter, which Triton picks per process when it is first imported; set it here, before any test module
imports triton. (With CUDA, Triton compiles, and the GPU tests cover the Triton backend.) The repo root goes on
sys.path for the shared ``tests.codegen.inputs``."""
import os
import sys
from pathlib import Path

import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
