"""The statement registry of the fuzz generator: each ``stmt_*(g) -> list[str] | None`` returns source lines
(indented relative to the enclosing block) and records the names it defines in ``g.env``."""
from __future__ import annotations

from .shapes import paren

INPLACE = ["{v}.add_({e})", "{v}.mul_({e})", "{v}.sub_({e}, alpha=0.5)", "{v}.copy_({e})", "{v}.relu_()",
           "{v}.clamp_(-0.5, 0.5)", "{v}.div_(2.0)", "{v}.sigmoid_()", "{v}.fill_({s})", "{v}.tanh_()",
           "{v}.mul_({s})", "{v}.add_({s})", "{v}.zero_()"]


def _tensor_names(g, inputs_ok=True):
    return [n for n in g.env.tensors if inputs_ok or n not in g.env.inputs]


def stmt_assign(g):
    name = g.fresh("t")
    e, shape = g.expr()
    g.env.tensors[name] = shape
    return [f"{name} = {e}"]


def _inplace_target(g, on_input: bool):
    names = [n for n in g.env.tensors if (n in g.env.inputs) == on_input]
    if on_input and g.rng.random() > 0.05:
        names = [n for n in names if n not in g.env.grad_inputs]
    if not names:
        return None
    name = g.rng.choice(names)
    if g.env.tensors[name] and g.rng.random() < 0.4:
        return g.view_of(name)
    return name, g.env.tensors[name]


def _inplace(g, on_input: bool):
    tgt = _inplace_target(g, on_input)
    if tgt is None:
        return None
    v, shape = tgt
    c = g.rng.random()
    if c < 0.2 and shape:
        from .shapes import slice_spec
        spec = slice_spec(g.rng, shape)
        rhs = g.shaped_expr(spec[1]) if g.rng.random() < 0.5 else g.scalar()
        return [f"{paren(v)}[{spec[0]}] = {rhs}"]
    if c < 0.3 and shape:
        idx = sorted({g.rng.randrange(shape[0]) for _ in range(2)})
        val = round(g.rng.uniform(-2, 2), 2)
        return [f"{paren(v)}.index_put_((torch.tensor({idx}),), torch.tensor({val}))"]
    tmpl = g.rng.choice(INPLACE)
    return [tmpl.format(v=paren(v), e=g.shaped_expr(shape), s=g.scalar())]


def stmt_inplace_input(g):
    return _inplace(g, True)


def stmt_inplace_temp(g):
    return _inplace(g, False)


def stmt_view_alias(g):
    name = g.rng.choice(list(g.env.tensors))
    v, shape = g.view_of(name)
    if v == name:
        return None
    alias = g.fresh("v")
    g.env.tensors[alias] = shape
    if name in g.env.inputs and name not in g.env.grad_inputs:
        g.env.inputs.add(alias)
    return [f"{alias} = {v}"]


def stmt_scalar(g):
    t, shape = g.operand()
    name = g.fresh("k")
    c = g.rng.random()
    numel = 1
    for s in shape:
        numel *= s
    if c < 0.2:
        g.env.ints[name] = (0, numel - 1)
        return [f"{name} = int({paren(t)}.argmax())"]
    if c < 0.35 and shape:
        d = g.rng.randrange(len(shape))
        g.env.ints[name] = (shape[d], shape[d])
        return [f"{name} = {t}.shape[{d}]" if g.rng.random() < 0.5 else f"{name} = {t}.size({d})"]
    if c < 0.45 and g.env.ints:
        k = g.rng.choice(list(g.env.ints))
        lo, hi = g.env.ints[k]
        g.env.ints[name] = (lo * 2 + 1, hi * 2 + 1)
        return [f"{name} = {k} * 2 + 1"]
    if c < 0.55:
        g.env.ints[name] = (0, 0)
        return [f"{name} = len({paren(t)}.shape) - len({paren(t)}.shape)"] if g.rng.random() < 0.3 else \
            [f"{name} = {paren(t)}.dim() * 0"]
    g.env.floats.append(name)
    red = g.rng.choice(["sum()", "mean()", "amax()", "abs().sum()"])
    conv = g.rng.choice(["float({x})", "{x}.item()", "{x}.tolist()"])
    return [f"{name} = " + conv.format(x=f"{paren(t)}.{red}")]


def stmt_if_tensor(g):
    t, _ = g.operand()
    thr = round(g.rng.uniform(-1, 1), 3)
    red = g.rng.choice(["sum()", "mean()", "amax()", "min()"])
    cond = g.rng.choice([f"{paren(t)}.{red} > {thr}", f"({paren(t)} > {thr}).any()",
                         f"{paren(t)}.{red}.item() < {thr}"])
    return _if(g, cond)


def stmt_if_python(g):
    if g.env.ints and g.rng.random() < 0.6:
        k = g.rng.choice(list(g.env.ints))
        cond = g.rng.choice([f"{k} % 2 == 0", f"{k} > 1", f"{k} == 0"])
    elif g.env.floats:
        cond = f"{g.rng.choice(g.env.floats)} > {round(g.rng.uniform(-1, 1), 2)}"
    else:
        t, shape = g.operand()
        cond = f"{t}.shape[0] > 3" if shape else f"{t}.dim() > 1"
    return _if(g, cond)


def _if(g, cond):
    saved = g.env.copy()
    body = g.block(g.rng.randint(1, 3), shape_preserving=True)
    g.env = saved.copy()
    lines = [f"if {cond}:"] + [f"    {ln}" for ln in body]
    if g.rng.random() < 0.6:
        other = g.block(g.rng.randint(1, 2), shape_preserving=True)
        lines += ["else:"] + [f"    {ln}" for ln in other]
    g.env = saved
    return lines


def stmt_for(g):
    saved = g.env.copy()
    i = g.fresh("i")
    c = g.rng.random()
    small = [k for k, (lo, hi) in g.env.ints.items() if hi <= 6]
    if c < 0.5 and small:
        k = g.rng.choice(small)
        bound = g.rng.choice([k, f"{k} - 1", f"min({k}, 3)"])
        g.env.ints[i] = (0, g.env.ints[k][1])
        header = f"for {i} in range({bound}):"
    elif c < 0.75 and g.env.lists:
        lst = g.rng.choice(list(g.env.lists))
        g.env.tensors[i] = g.env.lists[lst]
        header = f"for {i} in {lst}:"
    else:
        g.env.ints[i] = (0, 3)
        header = f"for {i} in range({g.rng.randint(0, 3)}):" if g.rng.random() < 0.5 else \
            f"for {i}, _e in enumerate([1.5, -0.5, 2.0][:{g.rng.randint(0, 3)}]):"
    body = g.block(g.rng.randint(1, 3), shape_preserving=True)
    g.env = saved
    lines = [header] + [f"    {ln}" for ln in body]
    if g.rng.random() < 0.1:
        lines.append(f"STATE.append({i})")      # the loop variable after the loop (unbound after zero trips)
    return lines


def stmt_while(g):
    j = g.fresh("j")
    saved = g.env.copy()
    g.env.ints[j] = (0, 3)
    body = g.block(g.rng.randint(1, 2), shape_preserving=True)
    g.env = saved
    bound = g.rng.randint(0, 3)
    return [f"{j} = 0", f"while {j} < {bound}:", f"    {j} += 1"] + [f"    {ln}" for ln in body]


def stmt_update(g):
    """``t = t <op> e`` keeping t's shape (the shape-preserving update used in loop and branch bodies)."""
    names = list(g.env.tensors)
    t = g.rng.choice(names)
    shape = g.env.tensors[t]
    e = g.shaped_expr(shape)
    op = g.rng.choice(["+", "*", "-"])
    if g.rng.random() < 0.3 and g.env.ints:
        e = f"{e} * {g.rng.choice(list(g.env.ints))}"
    return [f"{t} = {t} {op} {paren(e) if op != '+' else e}" if op != "*" else f"{t} = {t} * torch.tanh({e})"]


def stmt_list(g):
    t, shape = g.operand()
    name = g.fresh("L")
    g.env.lists[name] = shape
    c = g.rng.random()
    if c < 0.4:
        return [f"{name} = [{t}, {paren(t)} * 2, torch.sin({t})]"]
    if c < 0.7:
        j = f"{name}_j"
        return [f"{name} = [torch.tanh({paren(t)} * {j}) for {j} in range(3) if {j} >= 0]"]
    return [f"{name} = list(({t}, {paren(t)} + 1))", f"{name}.append({paren(t)}.exp().clamp(max=5))"]


def stmt_list_use(g):
    if not g.env.lists:
        return None
    lst = g.rng.choice(list(g.env.lists))
    shape = g.env.lists[lst]
    name = g.fresh("t")
    c = g.rng.random()
    if c < 0.3:
        g.env.tensors[name] = shape
        return [f"{name} = sum({lst})" if g.rng.random() < 0.5 else f"{name} = sum({lst}[1:], {lst}[0])"]
    if c < 0.6:
        g.env.tensors[name] = (3,) + shape if shape else (3,)
        return [f"{name} = torch.stack([e * 0.5 for e in {lst}[:3]])" if g.rng.random() < 0.5 else
                f"{name} = torch.stack({lst}[-3:])"]
    if c < 0.8:
        g.env.tensors[name] = ()
        return [f"{name} = torch.stack([e.sum() for e in {lst}]).sum()"]
    g.env.tensors[name] = shape
    return [f"{name}, *_rest = {lst}", f"{name} = {name} + len(_rest)"]


def stmt_dict(g):
    a, sa = g.operand()
    b, sb = g.operand()
    d = g.fresh("D")
    name = g.fresh("t")
    g.env.tensors[name] = sa
    key = g.rng.choice(["'p'", "'q'"])
    lines = [f"{d} = {{'p': {a}, 'q': {b}}}", f"{d}['r'] = {paren(a)} * 3"]
    if g.rng.random() < 0.5:
        lines.append(f"STATE.append(sorted({d}))")
    use = f"{d}['r'] + {d}['p']" if key == "'p'" or sa != sb else f"{d}['q'] - {d}['p']"
    if g.rng.random() < 0.4:
        use = f"{{k: v for k, v in {d}.items() if k != 'q'}}['r'] + {d}.get('zz', 1.0)"
    return lines + [f"{name} = {use}"]


def stmt_tuple(g):
    a, sa = g.operand()
    b, sb = g.operand()
    n1, n2 = g.fresh("t"), g.fresh("t")
    g.env.tensors[n1], g.env.tensors[n2] = sb, sa
    return [f"{n1}, {n2} = ({a}, {b})[::-1]"]


def stmt_closure(g):
    h = g.fresh("h")
    t, shape = g.operand()
    c = g.rng.random()
    if c < 0.35:
        sc = g.scalar()
        lines = [f"def {h}(z):", f"    return torch.tanh(z) * {sc} + {paren(t)}.mean()"]
    elif c < 0.6:
        lines = [f"def {h}_mk(c):", "    def inner(z):", "        return z * c + 1", "    return inner",
                 f"{h} = {h}_mk({g.scalar()})"]
    elif c < 0.8:
        lines = [f"{h} = lambda z, w={g.scalar()}: torch.sigmoid(z) * w"]
    else:
        lines = [f"{h}_cnt = [0]", f"def {h}(z):", f"    {h}_cnt[0] += 1", f"    return z + {h}_cnt[0]"]
    g.env.funcs.append(h)
    name = g.fresh("t")
    a, sa = g.operand()
    g.env.tensors[name] = sa
    return lines + [f"{name} = {h}({a})"]


def stmt_call(g):
    if not g.env.funcs:
        return None
    a, sa = g.operand()
    name = g.fresh("t")
    g.env.tensors[name] = sa
    return [f"{name} = {g.rng.choice(g.env.funcs)}({a})"]


def stmt_print(g):
    t, shape = g.operand()
    c = g.rng.random()
    if c < 0.3:
        return [f"print('p', {t}.shape, {g.scalar()})"]
    if c < 0.6:
        return [f"print('s', float({paren(t)}.sum()))"]
    if c < 0.8:
        return [f"print({t})"]
    return [f"print(f'{{{paren(t)}.mean().item():.3f}}', {t}.dtype)"]


def stmt_state(g):
    t, _ = g.operand()
    c = g.rng.random()
    if c < 0.4:
        return [f"STATE.append({g.scalar()})"]
    if c < 0.7:
        return [f"STATE.append({paren(t)}.sum().item())"]
    return [f"STATE.append(tuple({t}.shape))"]


def stmt_scalar_use(g):
    if not (g.env.ints or g.env.floats):
        return None
    t, shape = g.operand()
    name = g.fresh("t")
    g.env.tensors[name] = shape
    if g.env.ints and shape and g.rng.random() < 0.4:
        k = g.rng.choice(list(g.env.ints))
        g.env.tensors[name] = shape[1:]
        return [f"{name} = {paren(t)}[{k} % {shape[0]}]"]
    return [f"{name} = {paren(t)} * {g.scalar()} + {g.scalar()}"]


STMTS = [(stmt_assign, 10), (stmt_inplace_input, 3), (stmt_inplace_temp, 3), (stmt_view_alias, 2),
         (stmt_scalar, 3), (stmt_if_tensor, 2), (stmt_if_python, 1), (stmt_for, 2), (stmt_while, 1),
         (stmt_update, 2), (stmt_list, 1), (stmt_list_use, 2), (stmt_dict, 1), (stmt_tuple, 1),
         (stmt_closure, 1), (stmt_call, 1), (stmt_print, 1), (stmt_state, 1), (stmt_scalar_use, 2)]
BODY_STMTS = [(stmt_update, 6), (stmt_inplace_temp, 2), (stmt_inplace_input, 1), (stmt_print, 1),
              (stmt_state, 1), (stmt_scalar, 1), (stmt_assign, 1), (stmt_if_tensor, 1)]


def return_stmt(g) -> str:
    names = list(g.env.tensors)
    recent = names[-4:]
    outs = g.rng.sample(recent, min(len(recent), g.rng.randint(1, 3)))
    if g.rng.random() < 0.3 and g.env.ints:
        outs.append(g.rng.choice(list(g.env.ints)))
    if g.rng.random() < 0.2 and g.env.floats:
        outs.append(g.rng.choice(g.env.floats))
    c = g.rng.random()
    if c < 0.15:
        return "return {" + ", ".join(f"'o{i}': {o}" for i, o in enumerate(outs)) + "}"
    if c < 0.25:
        return f"return [{', '.join(outs)}]"
    if len(outs) == 1 and c < 0.6:
        return f"return {outs[0]}"
    return f"return ({', '.join(outs)},)"
