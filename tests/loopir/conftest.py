"""tests/loopir fixtures. Triton: on a machine without CUDA the Triton backend runs CPU tensors in Triton's
interpreter, which Triton picks per process when it is first imported; set it here, before any test module
imports triton (as tests/codegen/conftest.py does), so a test of this folder compiling with
``cpu_backend="triton"`` through ``ember.codegen.compile_graph`` directly runs whichever folder is collected
first."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
