"""A pytest plugin that runs PyTorch's Dynamo test files with ``torch.compile`` redirected to ``ember.compile``.

    python -m pytest -p tools.peer.plugin .peer/dynamo/test_misc.py

The test files are PyTorch's code: they are never committed here (see compare.py for where they go). The plugin
patches, before the test modules are imported:
- ``torch.compile`` -> ``ember.compile`` (backend names map: ``"inductor"``/None -> ``"ember"``, ``"eager"``,
  ``"aot_eager"`` as themselves; a callable backend such as ``CompileCounter`` is passed through, since ember
  takes torch.compile-contract backends; Inductor ``options`` are dropped);
- ``torch._dynamo.optimize(backend, nopython=...)`` and ``optimize_assert`` -> a decorator compiling with ember
  (``nopython`` is ``fullgraph``); used as a context manager it compiles nothing (the block runs eagerly);
  ``torch._dynamo.export`` / ``explain`` stay Dynamo's (they are not torch.compile);
- ``torch._dynamo.reset()`` / ``torch.compiler.reset()`` also reset ember;
- ``torch._dynamo.disable`` / ``torch.compiler.disable`` -> ``ember.disable``;
- ``torch._dynamo.exc.Unsupported`` -> a subclass whose ``issubclass``/``isinstance`` also accept
  ``ember.Unsupported``: a test that expects the compiler to refuse (``assertRaises(Unsupported)``) passes
  when ember refuses (a plain ``except Unsupported:`` still matches only Dynamo's class; an expected message,
  ``assertRaisesRegex(Unsupported, "Observed exception")``, still has to match);
- ``torch._dynamo.exc.BackendCompilerFailed`` likewise accepts ``ember.BackendCompilerFailed`` (a backend raised).
Time limits per test come from ``tools.peer.timeout``, loaded for both runs by compare.py.
"""
from __future__ import annotations

_BACKENDS = {None: "ember", "inductor": "ember", "eager": "eager", "aot_eager": "aot_eager",
             "cudagraphs": "cudagraphs", "aot_eager_decomp_partition": "aot_eager", "ember": "ember"}


def _backend(b):
    if b is None or isinstance(b, str):
        return _BACKENDS.get(b, "ember")
    return b


def _install() -> None:
    import torch
    import torch._dynamo

    import ember

    orig_reset = torch._dynamo.reset

    def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
                disable=False, **_ignored):
        if mode not in (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
            mode = None
        kw = dict(fullgraph=fullgraph, dynamic=dynamic, backend=_backend(backend), mode=mode, disable=disable)
        return ember.compile(model, **kw) if model is not None else ember.compile(**kw)

    class _Optimize:
        def __init__(self, backend="inductor", nopython=False, dynamic=None, disable=False):
            self.kw = dict(backend=_backend(backend), fullgraph=bool(nopython), dynamic=dynamic)
            self.disable = disable

        def __call__(self, fn):
            return fn if self.disable else ember.compile(fn, **self.kw)

        def __enter__(self):        # Dynamo compiles every frame run in the block; ember compiles none
            return self

        def __exit__(self, *exc):
            return False

    def optimize(*args, **kwargs):
        backend = args[0] if args else kwargs.pop("backend", "inductor")
        return _Optimize(backend, kwargs.get("nopython", False), kwargs.get("dynamic"), kwargs.get("disable", False))

    def optimize_assert(*args, **kwargs):
        backend = args[0] if args else kwargs.pop("backend", "inductor")
        return _Optimize(backend, True, kwargs.get("dynamic"))

    def reset():
        orig_reset()
        ember.reset()

    def disable(fn=None, recursive=True, **_ignored):
        return ember.disable(fn, recursive) if fn is not None else (lambda f: ember.disable(f, recursive))

    _alias_unsupported(torch._dynamo.exc, ember.Unsupported)
    _alias_exception(torch._dynamo.exc, "BackendCompilerFailed", ember.BackendCompilerFailed)
    torch.compile = compile
    # the public names only: eval_frame's own globals stay Dynamo's, since Dynamo's export() and explain()
    # call them (redirected, they handed Dynamo's internal backends to ember)
    torch._dynamo.optimize = optimize
    torch._dynamo.optimize_assert = optimize_assert
    torch._dynamo.reset = reset
    torch.compiler.reset = reset
    torch._dynamo.disable = disable
    torch.compiler.disable = disable
    try:
        import torch._dynamo.testing as testing
        testing.optimize_assert = optimize_assert
        testing.reset = reset
    except ImportError:
        pass


def _alias_unsupported(exc_module, ember_unsupported) -> None:
    _alias_exception(exc_module, "Unsupported", ember_unsupported)


def _alias_exception(exc_module, name: str, ember_class) -> None:
    """``exc_module.<name>`` -> a subclass that ``issubclass``/``isinstance`` also answer for ember's class of the
    same role (ember raises its own exception classes, API.md)."""
    orig = getattr(exc_module, name)

    class _Meta(type(orig)):
        def __subclasscheck__(cls, sub):
            return type.__subclasscheck__(cls, sub) or issubclass(sub, (orig, ember_class))

        def __instancecheck__(cls, obj):
            return cls.__subclasscheck__(type(obj))

    setattr(exc_module, name, _Meta(name, (orig,), {"__module__": orig.__module__, "__doc__": orig.__doc__}))


def pytest_configure(config):
    _install()
