"""The grammar of the wrapper source ember generates (``codegen.wrapper``), checked before a package's wrapper
is compiled, so the source in a package can only do what a generated wrapper does: bind sizes and strides of
its arguments, test layouts and alignment, allocate and view tensors, call the names its table binds (kernels,
``torch.ops`` overloads, prims), free buffers and return. It cannot import, reach attributes beyond the
listed tensor methods and ``torch.<dtype>``, use dunders, define anything but the wrapper, or name anything
the loader did not bind.
"""
from __future__ import annotations

import ast

import torch

_NODES = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Assign, ast.If, ast.IfExp, ast.Expr, ast.Call,
          ast.Name, ast.Load, ast.Store, ast.Del, ast.Delete, ast.Return, ast.Tuple, ast.List, ast.Dict,
          ast.Constant, ast.Attribute, ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp,
          ast.keyword, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow, ast.Div, ast.BitAnd, ast.BitOr,
          ast.Not, ast.USub, ast.UAdd, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot,
          ast.And, ast.Or)
_METHODS = {"size", "stride", "storage_offset", "is_contiguous", "data_ptr", "to"}
_BUILTINS = {"max", "min", "abs"}


class WrapperRejected(ValueError):
    """The source is not of the form ember generates."""


def _torch_attr_ok(attr: str) -> bool:
    return isinstance(getattr(torch, attr, None), (torch.dtype, torch.memory_format, torch.layout))


def check_wrapper(source: str, name: str, bound: set[str]) -> ast.Module:
    """The parsed ``source`` (to compile, not parsed again); ``WrapperRejected`` unless it defines only ``name``
    within the generated grammar, its free names all in ``bound`` (or ``max``/``min``/``abs``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise WrapperRejected(f"not valid Python: {e}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != name:
        raise WrapperRejected(f"it must define exactly one function, {name}")
    fn = tree.body[0]
    a = fn.args
    if fn.decorator_list or fn.returns or a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        raise WrapperRejected("the function's signature is not a plain list of arguments")
    local = {x.arg for x in a.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
    for node in ast.walk(fn):
        if not isinstance(node, _NODES):
            raise WrapperRejected(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.FunctionDef) and node is not fn:
            raise WrapperRejected("nested function")
        if isinstance(node, ast.Name):
            if node.id.startswith("__") or not (node.id in local or node.id in bound or node.id in _BUILTINS):
                raise WrapperRejected(f"line {node.lineno}: unknown name {node.id!r}")
            if node.id in _BUILTINS and node.id in local:
                raise WrapperRejected(f"line {node.lineno}: {node.id!r} rebound")
        elif isinstance(node, ast.Attribute):
            base = node.value
            if node.attr.startswith("_"):
                raise WrapperRejected(f"line {node.lineno}: attribute {node.attr!r}")
            if isinstance(base, ast.Name) and base.id == "torch" and "torch" not in local:
                if not _torch_attr_ok(node.attr):
                    raise WrapperRejected(f"line {node.lineno}: torch.{node.attr} is not a dtype")
            elif node.attr not in _METHODS:
                raise WrapperRejected(f"line {node.lineno}: method {node.attr!r} is not one a wrapper calls")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, bool, str, type(None))):
            raise WrapperRejected(f"line {node.lineno}: constant {node.value!r}")
    return tree
