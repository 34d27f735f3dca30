"""Every opcode that the running CPython emits for ordinary functions is either handled by ember's interpreter
or on its explicit reported-unsupported list: never an unknown opcode that crashes.

The corpus: the program modules of this suite, a few stdlib modules, and a snippet of less common constructs
(async, yield from, except*, match, class bodies with __class__, star imports in functions are not legal).
Every function code object is checked (found recursively through co_consts); module and class bodies are not,
because ember interprets functions, never module or class bodies.
"""
from __future__ import annotations

import dis
import importlib
import inspect
import sys
from pathlib import Path
from types import CodeType

import pytest

from ember.capture import registry, unsupported_opnames

HERE = Path(__file__).parent

PROGRAM_FILES = sorted(p.name for p in HERE.glob("program*.py"))

STDLIB_MODULES = ("json.decoder", "json.encoder", "textwrap", "string", "functools", "collections",
                  "dataclasses", "enum", "contextlib", "operator", "heapq", "bisect", "fractions",
                  "statistics", "copy", "pprint", "shlex", "difflib", "ast", "argparse", "typing", "inspect")

EXOTIC = '''
import asyncio

async def coro(xs):
    await asyncio.sleep(0)
    async with xs as y:
        pass
    async for v in xs:
        yield v
    yield [v async for v in xs]

async def plain_coro(aw):
    r = await aw
    return {k: v for k, v in r}

def gen(xs):
    got = yield from xs
    x = yield got
    return x

def groups(f):
    got = None
    try:
        f()
    except* ValueError as eg:
        got = eg
    except* (TypeError, KeyError):
        pass
    return got

def matcher(v):
    match v:
        case {"k": [1, *rest]} if rest:
            return rest
        case (1 | 2) as n:
            return n
        case complex(real=0.0):
            return "imag"
        case [*_, last]:
            return last
        case {**kw}:
            return kw
        case str() | bytes():
            return "s"

def scopes(a, *args, k=1, **kw):
    global G
    G = a
    del G
    x = [a, *args]
    y = {**kw, "k": k}
    z = {*x}
    def inner():
        nonlocal x
        x = 1
        del x
    class C:
        attr = a
        def m(self):
            return __class__, super().__init__()
    lam = lambda q=a, *, r=k: (q, r)
    s = f"{a!r:>{k}} {x!s} {y!a}"
    t = x[1:2], x[::k], x[1:2:3]
    x[1:2] = []
    del x[0], y["k"]
    import os.path as osp
    from os import sep
    with open(osp.join(sep)) as fh, open(sep):
        pass
    for i in range(3):
        try:
            continue
        finally:
            break
    assert a, "msg"
    e = not a
    return -a, +a, ~a, a @ a, a if e else k, (w := a), inner, C, lam, s, t, z, w

def exceptions(a):
    try:
        raise ValueError(a) from None
    except (ValueError, TypeError) as err:
        raise
    except Exception:
        raise RuntimeError
    else:
        pass
    finally:
        a = None
'''


def function_codes(code: CodeType, where: str):
    if code.co_flags & inspect.CO_OPTIMIZED:
        yield code, where
    for c in code.co_consts:
        if isinstance(c, CodeType):
            yield from function_codes(c, f"{where}:{c.co_name}")


def corpus() -> list[tuple[str, str, str]]:
    items = [(f"programs/{name}", (HERE / name).read_text(), str(HERE / name)) for name in PROGRAM_FILES]
    for modname in STDLIB_MODULES:
        mod = importlib.import_module(modname)
        path = inspect.getsourcefile(mod)
        items.append((f"stdlib/{modname}", Path(path).read_text(encoding="utf-8"), path))
    items.append(("exotic", EXOTIC, "<exotic>"))
    return items


def opnames_in(source: str, filename: str) -> dict[str, str]:
    """opname -> one place that uses it (qualified code name and line)."""
    found: dict[str, str] = {}
    module = compile(source, filename, "exec")
    for code, where in function_codes(module, Path(filename).name):
        for ins in dis.get_instructions(code):
            if ins.opname != "CACHE" and ins.opname not in found:
                line = ins.positions.lineno if ins.positions else None
                found[ins.opname] = f"{where} line {line}"
    return found


CORPUS = corpus()


@pytest.mark.parametrize("name,source,filename", CORPUS, ids=[c[0] for c in CORPUS])
def test_every_opcode_is_handled_or_reported(name, source, filename):
    known = set(registry.handled_opnames()) | set(unsupported_opnames())
    found = opnames_in(source, filename)
    missing = {op: where for op, where in sorted(found.items()) if op not in known}
    assert not missing, (f"CPython {sys.version_info[0]}.{sys.version_info[1]} emits opcodes that ember "
                         f"neither handles nor reports as unsupported (first use of each): {missing}")


def test_corpus_is_broad():
    """Guards the corpus itself: it must exercise the common opcode families on every version."""
    seen = set()
    for _, source, filename in CORPUS:
        seen |= set(opnames_in(source, filename))
    v = sys.version_info[:2]
    expected = ["LOAD_FAST", "STORE_FAST", "LOAD_GLOBAL", "LOAD_ATTR", "STORE_ATTR", "BINARY_OP",
                "COMPARE_OP", "CALL", "RETURN_VALUE", "FOR_ITER", "GET_ITER", "BUILD_LIST", "BUILD_MAP",
                "UNPACK_SEQUENCE", "UNPACK_EX", "LOAD_DEREF", "STORE_DEREF", "MAKE_FUNCTION", "RAISE_VARARGS",
                "RERAISE", "PUSH_EXC_INFO", "CHECK_EXC_MATCH", "BEFORE_WITH", "YIELD_VALUE", "MATCH_CLASS",
                "MATCH_MAPPING", "MATCH_SEQUENCE", "CALL_FUNCTION_EX", "BUILD_SLICE", "DELETE_FAST",
                "MAKE_CELL", "GET_AWAITABLE", "CHECK_EG_MATCH", "LOAD_BUILD_CLASS", "IMPORT_NAME",
                "IMPORT_FROM",
                "POP_JUMP_FORWARD_IF_FALSE" if v < (3, 12) else "POP_JUMP_IF_FALSE",
                "FORMAT_VALUE" if v < (3, 13) else "FORMAT_SIMPLE"]
    for op in expected:
        assert op in seen, f"the corpus no longer exercises {op}"


def real_opnames() -> set[str]:
    """Every opcode a code object of the running CPython can hold: not the specialized (adaptive) or
    instrumented forms, the compiler's pseudo-instructions (numbered from 256) or the RESERVED placeholder."""
    import opcode
    specialized = set(getattr(opcode, "_specialized_instructions", ()))
    specialized |= set(getattr(opcode, "_specialized_opmap", {})) | set(getattr(dis, "_specialized_opmap", {}))
    return {n for n, v in dis.opmap.items()
            if v < 256 and n not in specialized and not n.startswith("INSTRUMENTED_") and n != "RESERVED"}


def test_every_opcode_of_this_version_is_handled_or_reported():
    known = set(registry.handled_opnames()) | set(unsupported_opnames())
    missing = sorted(real_opnames() - known)
    assert not missing, (f"CPython {sys.version_info[0]}.{sys.version_info[1]} has opcodes that ember neither "
                         f"handles nor reports as unsupported: {missing}")


def test_handled_and_reported_lists_are_disjoint():
    both = sorted(set(registry.handled_opnames()) & set(unsupported_opnames()))
    assert not both, f"opcodes both handled and listed as unsupported: {both}"


def _exotic(name):
    ns = {}
    exec(compile(EXOTIC, "<exotic>", "exec"), ns)     # noqa: S102 - the test's own snippet
    return ns[name]


def test_unsupported_construct_is_reported():
    """A construct the symbolic interpreter does not capture ends in ember.Unsupported naming it (never a
    crash) under fullgraph, and the non-fullgraph compile runs the function natively instead."""
    from ember.capture import compile_python
    from ember.errors import Unsupported
    scopes = _exotic("scopes")
    with pytest.raises(Unsupported, match="class"):
        compile_python(scopes, fullgraph=True)(0)


@pytest.mark.parametrize("opname", sorted(set(unsupported_opnames()) & set(dis.opmap)))
def test_reported_opcode_names_itself_and_the_version(opname):
    from ember.capture.bytecode import Instr
    from ember.capture.concrete import ConcreteDomain
    from ember.capture.interpreter import Frame

    def host():
        return None
    frame = Frame(ConcreteDomain(), host.__code__, globals(), {})
    err = frame.unsupported_instruction(Instr(opname, 0, 0, "", 0, None, 0, None))
    assert opname in str(err) and f"CPython {sys.version_info[0]}.{sys.version_info[1]}" in str(err)


def test_except_star_runs_in_every_mode():
    from ember.capture import compile_python, run_concrete
    groups = _exotic("groups")

    def boom():
        raise ExceptionGroup("g", [ValueError(1), TypeError(2)])

    def one():
        raise ValueError("x")
    for f in (boom, one):
        try:
            ref = groups(f)
        except BaseException as e:      # noqa: BLE001
            ref = e
        for run in (lambda: run_concrete(groups, f), lambda: compile_python(groups)(f)):
            try:
                got = run()
            except BaseException as e:      # noqa: BLE001
                got = e
            assert type(got) is type(ref) and repr(got) == repr(ref)
