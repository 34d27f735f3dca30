"""Delta debugging over the statements of a failing program, keeping its failure class (kind + aspect).

Pass 1 runs ddmin over the function body's top-level statements (the ``return`` stays); pass 2 does the same
inside every compound statement (if/for/while/def bodies, an emptied body becomes ``pass``); before them
elements of the returned tuple/list are dropped; then unused inputs are dropped. Each candidate is one
``run.check`` (a compile per candidate), so the number of checks is capped.
"""
from __future__ import annotations

import ast
import dataclasses
import time

from .run import check


class _Budget:
    def __init__(self, max_checks: int, max_seconds: float):
        self.left = max_checks
        self.deadline = time.monotonic() + max_seconds

    def ok(self) -> bool:
        return self.left > 0 and time.monotonic() < self.deadline


def ddmin(items: list, still_fails, budget: _Budget) -> list:
    """Zeller's ddmin: the smallest subsequence (1-minimal within the budget) for which still_fails holds."""
    n = 2
    while len(items) >= 2 and budget.ok():
        size = max(1, len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        reduced = False
        for i in range(len(chunks)):
            rest = [x for j, c in enumerate(chunks) if j != i for x in c]
            if budget.ok() and still_fails(rest):
                items, n, reduced = rest, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), n * 2)
    if len(items) == 1 and budget.ok() and still_fails([]):
        return []
    return items


def _fn_def(tree: ast.Module) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fn")


def _bodies(node) -> list[tuple[object, str]]:
    """Every (node, field) statement list under ``node`` (bodies of compound statements), outermost first."""
    out = []
    for child in ast.walk(node):
        for field in ("body", "orelse"):
            if child is not node and isinstance(getattr(child, field, None), list) and \
                    getattr(child, field) and isinstance(getattr(child, field)[0], ast.stmt):
                out.append((child, field))
    return out


class Minimizer:
    def __init__(self, prog, backend, failure, timeout: float, max_checks: int = 120,
                 max_seconds: float = 300.0):
        self.prog, self.backend, self.key, self.timeout = prog, backend, failure.key, timeout
        self.budget = _Budget(max_checks, max_seconds)
        self.tree = ast.parse(prog.source)

    def fails(self, source: str, inputs=None) -> bool:
        self.budget.left -= 1
        cand = dataclasses.replace(self.prog, source=source,
                                   inputs=self.prog.inputs if inputs is None else inputs)
        try:
            compile(source, "<candidate>", "exec")
        except SyntaxError:
            return False
        res = check(cand, [self.backend], self.timeout)
        f = res["failures"].get(str(self.backend))
        return f is not None and f.key == self.key

    def _try_list(self, owner, field, keep_last: bool):
        stmts = getattr(owner, field)
        fixed = stmts[-1:] if keep_last else []
        movable = stmts[:-1] if keep_last else stmts

        def still(sub):
            setattr(owner, field, (sub + fixed) or [ast.Pass()])
            ok = self.fails(ast.unparse(self.tree))
            setattr(owner, field, stmts)
            return ok
        best = ddmin(movable, still, self.budget)
        setattr(owner, field, (best + fixed) or [ast.Pass()])

    def _flatten(self, owner, field):
        """Replace an if/while statement by its body, its else-branch or just its condition (which may still
        matter: a branch on a tensor value breaks the graph)."""
        stmts = getattr(owner, field)
        i = 0
        while i < len(stmts) and self.budget.ok():
            node = stmts[i]
            if isinstance(node, (ast.If, ast.While)):
                for branch in (node.body, node.orelse, [ast.Expr(node.test)]):
                    cand = stmts[:i] + branch + stmts[i + 1:]
                    setattr(owner, field, cand)
                    if branch and self.budget.ok() and self.fails(ast.unparse(self.tree)):
                        stmts = cand
                        break
                    setattr(owner, field, stmts)
                else:
                    i += 1
                continue
            i += 1
        setattr(owner, field, stmts)

    def _shrink_return(self, fn):
        ret = fn.body[-1]
        if not isinstance(ret, ast.Return) or not isinstance(ret.value, (ast.Tuple, ast.List)):
            return
        elts = ret.value.elts

        def still(sub):
            ret.value.elts = sub
            ok = bool(sub) and self.fails(ast.unparse(self.tree))
            ret.value.elts = elts
            return ok
        ret.value.elts = ddmin(elts, still, self.budget) or elts

    def _drop_inputs(self, fn):
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        for i, spec in reversed(list(enumerate(self.prog.inputs))):
            if spec[1] in used or not self.budget.ok():
                continue
            args = fn.args.args
            arg = next(a for a in args if a.arg == spec[1])
            fn.args.args = [a for a in args if a is not arg]
            inputs = self.prog.inputs[:i] + self.prog.inputs[i + 1:]
            if self.fails(ast.unparse(self.tree), inputs):
                self.prog = dataclasses.replace(self.prog, inputs=inputs,
                                                grad=any(s[0] == "tensor" and s[3] for s in inputs))
            else:
                fn.args.args = args

    def run(self):
        fn = _fn_def(self.tree)
        self._shrink_return(fn)       # first: every returned name keeps its defining statements alive
        for _round in range(2):       # nested reductions can unlock more top-level ones
            self._try_list(fn, "body", keep_last=True)
            self._flatten(fn, "body")
            self._try_list(fn, "body", keep_last=True)
            for owner, field in _bodies(fn):
                if self.budget.ok():
                    self._try_list(owner, field, keep_last=False)
        self._drop_inputs(fn)
        return dataclasses.replace(self.prog, source=ast.unparse(self.tree) + "\n")


def minimize(prog, backend, failure, timeout: float = 60.0, **kw):
    """The smallest program (within the budget) that still fails ``backend`` with ``failure``'s class."""
    return Minimizer(prog, backend, failure, timeout, **kw).run()
