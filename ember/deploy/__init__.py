"""Deployment (``ember.export``): one whole ATen graph of a model, with its parameters and buffers lifted as inputs, that can be
inspected, run, saved to one file of plain data and loaded back without capturing anything.

- ``export(model, args, kwargs=None, *, dynamic_shapes=None, strict=True)`` -> ``ExportedProgram``
  (``trace.py``): ``strict`` first checks with ember's capture (``fullgraph=True``) that the model has no graph
  break, then traces the model's forward on ember's fake tensors to a functional ATen graph.
- ``ExportedProgram`` (``program.py``): ``module()``, ``run_decompositions()``, ``print(ep)``.
- ``save(ep, path)`` / ``load(path)`` (``serialize.py``): JSON for the graph and the specs, raw bytes for the
  tensors; loading resolves op names only inside ``torch.ops``/ember's prims and runs no code from the file.
- ``Dim(name, min, max)`` (``dims.py``) declares a dynamic size.
- ``aot_compile(ep, path, device, options)`` (``package.py``) / ``load_package(path)`` (``package_load.py``):
  a directory of compiled kernels, the generated wrapper and the weights, loaded with no capture, tracing or
  compiling.
"""
from .dims import Dim
from .program import ExportedProgram, InputSpec, OutputSpec
from .serialize import FORMAT_VERSION, load, save
from .package_load import load_package


def __getattr__(name: str):
    # ``export`` (trace.py) imports the symbolic machinery (sympy), ``aot_compile`` the compiler: loaded on first
    # use, so that a process that only loads packages or saved programs does not pay for them
    if name == "export":
        from .trace import export
        return export
    if name == "aot_compile":
        from .package import aot_compile
        return aot_compile
    raise AttributeError(f"module 'ember.deploy' has no attribute {name!r}")


__all__ = ["Dim", "ExportedProgram", "InputSpec", "OutputSpec", "export", "save", "load", "FORMAT_VERSION",
           "aot_compile", "load_package"]
