"""The graph family: custom programs (checked reads by operand and unsigned address, distinct
errors, evaluation in increasing output order stopping at the first failure, the output-size
limit, empty outputs, the caller's pullback) and detach (identity, no contribution)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import custom as C
from roundoff_coverage.routes.errors import RouteError
from roundoff_coverage.routes.graph import Graph
from roundoff_coverage.routes.ports import value


class Logged(C.Program):
    """A program that records each read (operand, address) it attempts, in order."""

    def read(self, flats, operand, address):
        self.log.append((operand, address))
        return super().read(flats, operand, address)


def logged(name, body):
    p = Logged(name, body)
    object.__setattr__(p, "log", [])
    return p


def run(program, inputs, shape, limit=C.WORD):
    xp = numerics.exact()
    return program.eval(xp, [xp.asarray(np.asarray(x, dtype=np.float64)) for x in inputs],
                        shape, limit)


def test_program_reads_by_operand_and_row_major_address():
    # y[i] = x0[i] * x1[(i + 1) mod 3] + i, over a [3] and a [1, 3] operand.
    body = C.Apply("add", C.Apply("multiply", C.Read(0, C.Out()),
                                  C.Read(1, C.Idx("mod", C.Idx("add", C.Out(), C.Nat(1)),
                                                  C.Nat(3)))),
                   C.Cast(C.Out()))
    y = run(C.Program("p", body), [[1.0, 2.0, 3.0], [[0.5, -1.0, 4.0]]], (3,))
    assert list(y) == [Fraction(-1), Fraction(8 + 1), Fraction(3, 2) + 2]


def test_index_arithmetic_is_unsigned_and_wraps():
    p = C.Program("w", C.Cast(C.Idx("sub", C.Nat(0), C.Nat(1))))
    assert list(run(p, [], (1,))) == [2 ** 64 - 1]
    q = C.Program("d", C.Cast(C.Idx("div", C.Out(), C.Nat(0))))
    assert list(run(q, [], (2,))) == [0, 0]


def test_invalid_operand_is_its_own_error():
    p = logged("prog", C.Read(2, C.Out()))
    with pytest.raises(C.OperandError) as err:
        run(p, [[1.0], [2.0]], (1,))
    assert str(err.value) == "custom prog: operand 2 does not exist (the program has 2 operands)"
    assert not isinstance(err.value, C.BoundsError) and isinstance(err.value, RouteError)


def test_out_of_bounds_address_is_its_own_error():
    p = logged("prog", C.Read(0, C.Idx("add", C.Out(), C.Nat(2))))
    with pytest.raises(C.BoundsError) as err:
        run(p, [[1.0, 2.0, 3.0]], (3,))
    assert str(err.value) == "custom prog: address 3 is out of bounds for operand 0 of size 3"
    assert not isinstance(err.value, C.OperandError)
    assert p.log == [(0, 2), (0, 3)]                 # index 0 read, index 1 failed, stop


def test_evaluation_stops_at_the_first_failure_in_index_order():
    # Index 2 fails twice: x0 at address 4 (bounds) and x1 at 1 - 2 = 2**64 - 1; the first
    # read in the tree's order is reported and nothing after it runs.
    body = C.Apply("add", C.Read(0, C.Idx("mul", C.Out(), C.Nat(2))),
                   C.Read(1, C.Idx("sub", C.Nat(1), C.Out())))
    p = logged("order", body)
    with pytest.raises(C.BoundsError) as err:
        run(p, [[1.0, 2.0, 3.0], [5.0, 6.0]], (3,))
    assert str(err.value) == "custom order: address 4 is out of bounds for operand 0 of size 3"
    assert p.log == [(0, 0), (1, 1), (0, 2), (1, 0), (0, 4)]


def test_output_size_limit_is_refused_before_any_read():
    p = logged("big", C.Read(0, C.Out()))
    with pytest.raises(C.SizeError) as err:
        run(p, [[1.0]], (2 ** 32, 2 ** 32, 2))
    assert str(err.value) == ("custom big: output size 36893488147419103232 exceeds the "
                              "unsigned addressing limit 18446744073709551616")
    with pytest.raises(C.SizeError, match="output size 4 exceeds the unsigned addressing "
                                          "limit 3"):
        run(p, [[1.0, 2.0, 3.0, 4.0]], (4,), limit=3)
    assert p.log == []
    assert list(run(p, [[1.0, 2.0, 3.0]], (3,), limit=3)) == [1, 2, 3]


def test_empty_output_makes_no_reads():
    p = logged("empty", C.Read(9, C.Out()))
    y = run(p, [[1.0]], (2, 0))
    assert y.shape == (2, 0) and p.log == []


def test_malformed_programs_are_refused_at_construction():
    with pytest.raises(ValueError, match="not a backend primitive"):
        C.Apply("frobnicate", C.Const(1))
    with pytest.raises(ValueError, match="operand must be a natural number"):
        C.Read(-1, C.Out())
    with pytest.raises(ValueError, match="expected an index expression"):
        C.Program("bad", C.Read(0, C.Const(1)))


def test_bound_rule_uses_the_supplied_pullback():
    o = routes.op("custom", program="square", inputs=((3,),), shape=(3,))
    square = C.Program("square", C.Apply("multiply", C.Read(0, C.Out()), C.Read(0, C.Out())))
    # The policy: 7 g, deliberately not the derivative 2 x g of the program.
    bound = C.bind(o, square, lambda xp, xs, y, g: (xp.multiply(xp.full_like(g, 7), g),))
    assert bound == o and bound.inputs == o.inputs
    rule = bound.rule(numerics.exact())
    x = [1.0, -2.0, 0.5]
    assert list(rule.forward((x,))[0]) == [1, 4, Fraction(1, 4)]
    assert list(rule.backward((x,), ([1.0, 2.0, 3.0],))[0]) == [7, 14, 21]
    ys, pull = rule.prepare((x,), (True,))
    assert list(pull(([1.0, 0.0, 0.0],))[0]) == [7, 0, 0]
    with pytest.raises(RouteError, match="no forward-mode rule"):
        rule.jvp((x,), ([1.0, 1.0, 1.0],))
    with pytest.raises(RouteError, match="custom square: no pullback was supplied"):
        C.bind(o, square).rule(numerics.exact()).backward((x,), ([1.0, 1.0, 1.0],))


def test_plain_custom_entry_runs_the_zero_program():
    o = routes.op("custom", program="outer", inputs=((2,),), shape=(2, 2))
    rule = o.rule(numerics.exact())
    assert np.asarray(rule.forward(([3.0, 4.0],))[0]).tolist() == [[0, 0], [0, 0]]
    assert list(rule.backward(([3.0, 4.0],), (np.ones((2, 2)),))[0]) == [0, 0]


def test_detach_passes_values_and_stops_gradients():
    xp = numerics.exact()
    rule = routes.op("detach", shape=(3,)).rule(xp)
    x = [1.5, -2.0, 0.25]
    assert list(rule.forward((x,))[0]) == [Fraction(3, 2), -2, Fraction(1, 4)]
    assert rule.backward((x,), ([1.0, 1.0, 1.0],)) == (None,)
    assert list(rule.jvp((x,), (None,))[0]) == [0, 0, 0]
    # y = detach(x) * x: the gradient at x is detach(x) = x alone, not 2x.
    g = Graph(x=value((3,)))
    d = g.apply(routes.op("detach", shape=(3,)), g.input("x"))
    g.output(g.apply(routes.op("mul", shape=(3,)), d, g.input("x")))
    (grad,) = g.rule(xp).backward((x,), ([1.0, 1.0, 1.0],))
    assert list(grad) == [Fraction(3, 2), -2, Fraction(1, 4)]


def test_bound_custom_node_runs_in_a_graph_and_its_record_has_no_program():
    o = routes.op("custom", program="rdiff", inputs=((2,), (2,)), shape=(2,))
    # y[i] = x0[i] - x1[1 - i] (a reversed difference); pullback: (g, -reverse(g)), exact here.
    diff = C.Program("rdiff", C.Apply("subtract", C.Read(0, C.Out()),
                                      C.Read(1, C.Idx("sub", C.Nat(1), C.Out()))))
    bound = C.bind(o, diff, lambda xp, xs, y, g: (g, xp.negative(g[::-1])))
    g = Graph(a=value((2,)), b=value((2,)))
    g.output(g.apply(bound, g.input("a"), g.input("b")))
    rule = g.rule(numerics.exact())
    assert list(rule.forward(([5.0, 7.0], [1.0, 2.0]))[0]) == [3, 6]
    ga, gb = rule.backward(([5.0, 7.0], [1.0, 2.0]), ([1.0, 10.0],))
    assert list(ga) == [1, 10] and list(gb) == [-10, -1]
    assert routes.decode(routes.encode(bound)) == o      # the record carries no program
    assert routes.encode(o)["fields"] == [["text", "rdiff"], ["shapes", [[2], [2]]],
                                          ["shape", [2]]]
    with pytest.raises(RouteError, match="the node is named 'rdiff' but the program 'other'"):
        C.bind(o, C.Program("other", C.Read(0, C.Out())))
    with pytest.raises(RouteError, match="custom: program must be a name of 1 to 64"):
        routes.op("custom", program="two words")
