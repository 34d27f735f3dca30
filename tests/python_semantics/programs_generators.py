"""Programs: the generator protocol beyond plain iteration: close() and garbage collection running a
generator's finally, throw(), send(), `yield from` return values and delegation of close/throw."""
import collections.abc

from program_table import Table

T = Table("generators")


def logged(log, n):
    try:
        for i in range(n):
            yield i
    finally:
        log.append("closed")


def catcher(log):
    while True:
        try:
            got = yield len(log)
            log.append(("got", got))
        except ValueError as e:
            log.append(("caught", str(e)))
        except GeneratorExit:
            log.append("exit")
            raise


def inner(log):
    try:
        got = yield "inner-1"
        log.append(("inner got", got))
        yield "inner-2"
    finally:
        log.append("inner closed")
    return "inner-result"


def outer(log):
    try:
        r = yield from inner(log)
        log.append(("outer got", r))
        yield "outer-1"
    finally:
        log.append("outer closed")


def returns(n):
    yield n
    return n * 10


@T.case((3,), (0,))
def generator_collected_runs_finally(n):
    log = []
    for v in logged(log, n):
        log.append(v)
        break
    log.append("after")
    return log


@T.case((4,),)
def generator_closed_twice_and_unstarted(n):
    log = []
    g = logged(log, n)
    g.close()                       # never started: its finally does not run
    h = logged(log, n)
    first = next(h)
    h.close()
    h.close()
    rest = list(h)
    return log, first, rest


@T.case((2,),)
def generator_throw_caught_inside(n):
    log = []
    g = catcher(log)
    out = [next(g)]
    out.append(g.throw(ValueError("bad")))
    out.append(g.send(n))
    g.close()
    return out, log


@T.case(("v",),)
def generator_throw_uncaught_propagates(tag):
    log = []
    g = logged(log, 3)
    next(g)
    try:
        g.throw(KeyError(tag))
    except KeyError as e:
        caught = e.args
    return caught, log, list(g)


@T.case((5,),)
def generator_return_value_via_stopiteration(n):
    g = returns(n)
    first = next(g)
    try:
        next(g)
    except StopIteration as e:
        return first, e.value


@T.case(("x",),)
def yield_from_send_and_return_value(tag):
    log = []
    g = outer(log)
    out = [next(g), g.send(tag), next(g)]
    try:
        next(g)
    except StopIteration:
        out.append("done")
    return out, log


@T.case(("x",),)
def yield_from_close_closes_inner_first(tag):
    log = []
    g = outer(log)
    out = [next(g), g.send(tag)]
    g.close()
    return out, log


@T.case((3,),)
def generator_send_to_unstarted_raises(n):
    g = returns(n)
    try:
        g.send(n)
    except TypeError as e:
        return "TypeError", str(e), next(g)


@T.case(([1, 2, 3],),)
def generator_expression_left_unfinished(xs):
    it = (x * 2 for x in xs)
    first = next(it)
    return first, any(x > 2 for x in xs), sum(1 for _ in it)


def flatten_gen(rows):
    for r in rows:
        yield from r
    yield "end"


@T.case(([[1, 2], [], [3]],), ([],))
def yield_from_inside_a_loop(rows):
    return list(flatten_gen(rows)), [x for x in flatten_gen(rows) if x != "end"]



class Squares(collections.abc.Sequence):
    """A Sequence by __getitem__/__len__: iter() is collections.abc.Sequence.__iter__, a generator whose
    body is inside try/except IndexError, left suspended by a `break`."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return i * i

    def __len__(self):
        return self.n


@T.case((5,), (0,))
def sequence_iterator_left_suspended(n):
    s = Squares(n)
    out = []
    for v in s:
        out.append(v)
        if v > 3:
            break
    return out, list(s), s.index(4) if n > 2 else -1
