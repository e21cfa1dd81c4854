"""The operator families: importing this package registers every operator.

How to add an operator
======================

1. Find its row in routes/vocabulary.py (the spec's table): the name (spec spelling,
   camelCase: ``logSoftmax``), the family, the capability its rule reads.  Write its block
   in ``routes/families/<family>.py`` (create the module and import it below if needed).
   One operator, one block: everything about it sits there.

2. Elementwise on one value port: ``unary_elementwise``; on two: ``binary_elementwise``
   (routes/helpers.py).  The whole of exp::

       unary_elementwise(
           "exp", "transcendental",
           f=lambda xp, x: xp.exp(x),
           d=lambda xp, x, y, v: xp.multiply(v, y),     # derivative at x applied to v
           oracle=lambda ctx, x: ctx.exp(x),            # independent mpmath value
           float64=(np.exp, lambda x, g: g * np.exp(x)),  # independent numpy binary64
           domain=Domain(ordinary=uniform(-8, 8), edges=pick(_exp_edges)),
           notes=("exp(-inf) = 0, ...",),
           certificates=("derivative", "algebraic", "prepared", roundoff(0.5)),
       )

   Anything else: ``define(name, family, attributes=..., ports=..., forward=...,
   backward=..., jvp=..., ...)`` (routes/registry.py documents every signature; clamp in
   extrema.py is a full example with frozen ports, validate and custom samplers).

3. Rules (forward, backward, jvp, validate) take the backend ``xp`` first and compute with
   its primitives only (``xp.add``, ``xp.exp``, ``xp.where``, ``xp.greater``,
   ``xp.zeros_like``, ``xp.full_like(v, "0.5")``...).  Never ``np.``/``math.`` arithmetic or
   ``float()`` on values: the rule must run unchanged at 256 bits, in float8 and on exact
   rationals.  numpy is fine for shapes and data movement (reshape, transpose, indexing,
   ``&`` of comparison masks).  Literals are decimal strings or ints given to
   ``xp.constant``/``xp.full_like``: the backend rounds them once.  Numeric attributes
   (epsilon, slopes, bounds) are frozen input ports, never Python floats.

4. Attributes (routes/attributes.py): ``A.shape()``, ``A.nat("axis")``,
   ``A.choice("rounding_mode", ("none", "trunc", "floor"))``, ``A.flag``, ``A.nats``.  Ports
   are computed from them: ``ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)})``.
   Constraints between attributes go in ``check(a) -> message | None`` ("axis must be < rank
   2 (got 5)"; the machinery prefixes the operator's name); value-domain checks in
   ``validate(xp, a, *xs) -> message | None``.  A capability the rule reads: ``needs="Erf"``
   or ``needs=lambda a: "Rounding" if a.rounding_mode != "none" else None``.

5. Conventions: state them in ``notes`` (kinks, ties, NaN, branch cuts) and pin each with a
   test in tests/routes/test_routes_conventions.py, registered as ``convention(test, statement)``.

6. Evidence and test data in the entry: ``examples`` (label -> attributes for extra test
   instances), ``bad_attributes`` ((attributes, message fragment), ...) reaching every
   ``check`` message, ``bad_inputs`` ((attributes, inputs, message fragment), ...) reaching
   every ``validate`` message, ``known_failures`` (KnownFailure(route, reason): strict xfail),
   ``certificates`` ("derivative", "algebraic", "prepared", convention(...), roundoff(ulps)).
   tests/routes/test_routes_registry.py then runs every registry-wide test on it for free:
   ``.venv/bin/python -m pytest -q tests/routes/test_routes_registry.py -k <name>``.
"""

# Registration order is the spec's family order (names() and `roundoff-coverage ops` keep it).
from . import elementwise  # noqa: F401,I001
from . import pow_remainder  # noqa: F401
from . import guarded  # noqa: F401
from . import transcendental  # noqa: F401
from . import rounding  # noqa: F401
from . import extrema  # noqa: F401
from . import activation  # noqa: F401
from . import logic  # noqa: F401
from . import integer  # noqa: F401
from . import scan_order  # noqa: F401
from . import indexing  # noqa: F401
from . import movement  # noqa: F401
from . import reduction  # noqa: F401
from . import product  # noqa: F401
from . import conv_pool  # noqa: F401
from . import pool  # noqa: F401
from . import normalization  # noqa: F401
from . import softmax_attention  # noqa: F401
from . import loss  # noqa: F401
from . import slice_loss  # noqa: F401
from . import random  # noqa: F401
from . import spectral  # noqa: F401
from . import graph  # noqa: F401
