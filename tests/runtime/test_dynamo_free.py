"""ember's traces run torch's meta kernels, some of which torch wraps to disable Dynamo; the wrapper's first
call imported torch._dynamo (3 s on the 2-core machine). ``ember.dynamo_free`` gives them a stand-in until
torch._dynamo is imported. Each test runs in a fresh process: whether torch._dynamo is imported is per process."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=str(ROOT), env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                              "HOME": "/tmp", "EMBER_COMPILE_WORKERS": "0"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_compiling_and_training_does_not_import_dynamo():
    out = _run("""
import sys, torch, ember
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
f = ember.compile(lambda x: (m(x) * 2 + 1).softmax(-1).sum())
x = torch.randn(4, 8)
f(x).backward()
ref = [p.grad.clone() for p in m.parameters()]
for p in m.parameters():
    p.grad = None
(m(x) * 2 + 1).softmax(-1).sum().backward()
for a, p in zip(ref, m.parameters()):
    torch.testing.assert_close(a, p.grad)
print("dynamo imported:", "torch._dynamo" in sys.modules)
""")
    assert "dynamo imported: False" in out, out


def test_torch_compile_after_ember_gets_the_real_disabled_functions():
    """Once torch._dynamo is imported, a stand-in builds the function Dynamo-disabled, as torch's wrapper does,
    and hands over to it; torch.compile works in the same process."""
    out = _run("""
import sys, torch, ember
from ember import dynamo_free
f = ember.compile(lambda x: torch.relu(x + 1) * 2)
x = torch.randn(4, 8)
torch.testing.assert_close(f(x), torch.relu(x + 1) * 2)
stand_ins = [fn for fn in dynamo_free._PATCHED if isinstance(getattr(fn, "__dynamo_disable"), dynamo_free._UntilDynamo)]
assert stand_ins, "no function got a stand-in"
import torch._dynamo
a = torch.empty(4, 8, device="meta")
assert (a + a).shape == (4, 8)          # a meta kernel behind a stand-in, now with torch._dynamo imported
left = [fn for fn in stand_ins if isinstance(getattr(fn, "__dynamo_disable"), dynamo_free._UntilDynamo)]
assert len(left) < len(stand_ins), "no stand-in handed over to the real disabled function"
g = torch.compile(lambda x: torch.relu(x + 1) * 2, backend="eager")
torch.testing.assert_close(g(x), torch.relu(x + 1) * 2)
print("ok")
""")
    assert "ok" in out, out


def test_every_wrapped_function_gets_a_stand_in():
    """The stand-ins are found through the wrapper's code object (``gc.get_referrers``, not a Python loop over
    the heap): every live function torch wrapped, and not called yet, is covered, as a full heap scan finds."""
    out = _run("""
import gc, types, torch, torch._refs, torch._decomp, torch._meta_registrations
from ember import dynamo_free
code = dynamo_free._wrapper_code()
assert code is not None
def wrapped():
    return {id(c.cell_contents) for o in gc.get_objects() if type(o) is types.FunctionType and o.__code__ is code
            and o.__closure__ for n, c in zip(code.co_freevars, o.__closure__) if n == "fn"}
before = wrapped()
dynamo_free.avoid_dynamo_import()
patched = {id(f) for f in dynamo_free._PATCHED}
assert before and before == patched, (len(before), len(patched))
print("ok", len(patched))
""")
    assert "ok" in out, out
