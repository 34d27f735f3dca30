"""Write a failing (minimized) program as a standalone reproducer: ``python repro.py`` runs it eagerly and
with ember on the same inputs, prints both, and exits 1 while they differ. ``python -m tools.fuzz.repro FILE``
re-checks a reproducer with the full harness (all compared aspects)."""
from __future__ import annotations

import ast
import sys

TEMPLATE = '''"""ember fuzz reproducer: seed {seed}, backend {backend!r}
{kind} / {aspect}: {detail}
"""
{source}

INPUTS = {inputs!r}
GRAD = {grad!r}
BACKEND = {backend!r}
SEED = {seed!r}


def make_inputs(call):
    vals = []
    for i, spec in enumerate(INPUTS):
        if spec[0] == "tensor":
            gen = torch.Generator().manual_seed((SEED * 7 + call) * 1009 + i)
            vals.append(torch.randn(spec[2], generator=gen).requires_grad_(spec[3]))
        else:
            vals.append(spec[2])
    return vals


def run(f):
    STATE.clear()
    outs = []
    for call in range(2):
        args = make_inputs(call)
        try:
            out = f(*args)
            if GRAD:
                ts = [t for t in (out if isinstance(out, (tuple, list)) else
                                  out.values() if isinstance(out, dict) else [out])
                      if isinstance(t, torch.Tensor) and t.requires_grad]
                if ts:
                    sum((t * (1 + 0.25 * i)).sum() + (t * t).sum() * 0.05
                        for i, t in enumerate(ts)).backward()
        except Exception as e:
            outs.append(("raised", type(e).__name__, str(e)[:300]))
            break
        outs.append((out, args, [a.grad if isinstance(a, torch.Tensor) else None for a in args], list(STATE)))
    return outs


def same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and
                torch.allclose(a.detach(), b.detach(), rtol=1e-3, atol=1e-4, equal_nan=True))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-3 * max(1.0, abs(a)) or (a != a and b != b)
    return a == b


if __name__ == "__main__":
    import ember
    expected = run(fn)
    print("eager:", expected)
    actual = run(ember.compile(fn, backend=BACKEND))
    print("ember:", actual)
    if expected and expected[0][0] == "raised" or actual and actual[0][0] == "raised":
        ok = [e[:2] for e in expected] == [a[:2] for a in actual]
    else:
        ok = same(expected, actual)
    print("OK" if ok else "MISMATCH (printed output is not compared here: see the two runs above)")
    raise SystemExit(0 if ok else 1)
'''


def render(prog, backend, failure) -> str:
    return TEMPLATE.format(seed=prog.seed, backend=str(backend), kind=failure.kind, aspect=failure.aspect,
                           detail=failure.detail.replace('"""', "'''"), source=prog.source.rstrip(),
                           inputs=prog.inputs, grad=prog.grad)


def load_repro(path: str):
    """The Program and backend of a reproducer file (its literals are read with ast, nothing is executed)."""
    from .gen import Program
    text = open(path).read()
    tree = ast.parse(text)
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and \
                node.targets[0].id in ("INPUTS", "GRAD", "BACKEND", "SEED"):
            consts[node.targets[0].id] = ast.literal_eval(node.value)
    helpers = ("make_inputs", "run", "same")
    keep = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in helpers)
            and not isinstance(n, ast.If) and not (isinstance(n, ast.Assign) and n.targets[0].id in consts)
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    source = ast.unparse(ast.Module(body=keep, type_ignores=[])) + "\n"
    return Program(consts["SEED"], source, tuple(consts["INPUTS"]), consts["GRAD"]), consts["BACKEND"]


def main(argv) -> None:
    """``python -m tools.fuzz.repro [--minimize] FILE...``: re-check (and re-minimize in place)."""
    from .minimize import minimize
    from .run import check
    for path in [a for a in argv if a != "--minimize"]:
        prog, backend = load_repro(path)
        f = check(prog, [backend])["failures"].get(backend)
        print(path, f)
        if f is not None and "--minimize" in argv:
            small = minimize(prog, backend, f, max_seconds=600.0, max_checks=300)
            with open(path, "w") as out:
                out.write(render(small, backend, f))
            print(small.source)


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    main(sys.argv[1:])
