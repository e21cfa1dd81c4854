"""Mask and draw kernels: dropout (forward and gradient), topKMask, bernoulliMask and
randUniform, each the rule of routes/families/random.py on the device.

The generator.  Word ``counter`` under ``key`` is random.py's ``words(key, counters)``,
SplitMix64 in wrap-around 64-bit unsigned arithmetic:

    s = key + (counter + 1) * 0x9E3779B97F4A7C15                       (mod 2**64)
    s = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9;  s = (s ^ (s >> 27)) * 0x94D049BB133111EB
    word = s ^ (s >> 31)

On the device every operand is a uint64: the constants are np.uint64 globals, the key
travels as a uint64 array and the counter (the thread's element index) is cast before use.
numba would otherwise type a mixed int64 / uint64 operation as float64 (and the simulator's
numpy scalars would do the same), which would lose the low bits; uint64 products and sums
wrap modulo 2**64 on the GPU (mul.lo.u64, add.u64) and in numpy, which is the definition.

The draw: k = word >> 11 (the top 53 bits) and u = k * 2**-53, a dyadic that binary64 holds
exactly (k < 2**53 converts exactly, and scaling by a power of two far above the subnormal
range is exact): integer data turned into one exact binary64 value, no rounding.  The rule
then reads u with ``xp.asarray``, one rounding into the format; the kernel rounds it with the
``multiply`` primitive as u * 1, which is exact in binary64 and therefore the one rounding of
u under the mode (binary32: the conversion to binary32 rounds to nearest even; emulated: the
format's rounding of the binary64 value u).

Rules mirrored (element i row-major reads counter i):
- randUniform: ``asarray(u_i)``.
- bernoulliMask: 1 where ``asarray(u_i) < p_i``, else 0 (``_bernoulli_forward``: a
  comparison and a selection, so 0 and 1 exactly).
- dropout: ``where(mask == 1, x / (1 - p), 0)`` (``_keep``): 1 - p rounded, then the
  quotient rounded; a dropped entry is +0 whatever x is (NaN and inf included).  The
  gradient is the same map on the cotangent.
- topKMask: element i of a slice along ``axis`` is kept when fewer than k elements j beat it
  (``_topk_forward``): j beats i when x_j is NaN and x_i is not, when x_j > x_i, or when j < i
  and the two are equal (-0 == +0) or both NaN.  One thread per element counts over its
  slice: comparisons only, nothing rounds, so the mask is exact in every format and mode.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from roundoff_coverage.routes.families.random import GOLDEN, MIX1, MIX2

from .base import DIRECTED, FEW32, Instance, Kernel, flat
from .contract import TRACED, Contract

_GOLDEN, _MIX1, _MIX2 = np.uint64(GOLDEN), np.uint64(MIX1), np.uint64(MIX2)
_ONE = np.uint64(1)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_TWO_M53 = 2.0 ** -53


@cuda.jit(device=True)
def splitmix_word(key, counter):
    """SplitMix64 word ``counter`` under ``key`` (both uint64), every operation uint64."""
    s = key + (counter + _ONE) * _GOLDEN
    s = (s ^ (s >> _S30)) * _MIX1
    s = (s ^ (s >> _S27)) * _MIX2
    return s ^ (s >> _S31)


@cuda.jit(device=True)
def uniform_dyadic(key, counter):
    """k / 2**53, k the word's top 53 bits: an exact binary64 value in [0, 1) (module doc:
    the uint64 -> float64 conversion of k < 2**53 and the power-of-two scaling are exact)."""
    k = splitmix_word(key, counter) >> _S11
    return np.float64(k) * _TWO_M53


@cuda.jit
def _words_kernel(keys, counters, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = splitmix_word(keys[i], counters[i])


def device_words(keys, counters, simulated=True):
    """SplitMix64 words computed by the device code (one thread per pair): a uint64 array.
    For tests: run in the simulator (NUMBA_ENABLE_CUDASIM=1) or on a GPU."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
    counters = np.ascontiguousarray(counters, dtype=np.uint64).reshape(-1)
    out = np.zeros(keys.size, dtype=np.uint64)
    if out.size:
        threads = min(32, out.size) if simulated else 128
        _words_kernel[(out.size + threads - 1) // threads, threads](keys, counters, out)
    return out


def _key(o):
    """The key attribute as a one-element uint64 array (a natural below 2**64)."""
    return np.array([o.attrs.key], dtype=np.uint64)


# ----- device kernels ---------------------------------------------------------------------------
def make_draws(P: dict):
    """uniform(out, key, rp): randUniform; bernoulli(p, out, key, rp): bernoulliMask."""
    mul = P["multiply"]

    @cuda.jit
    def uniform(out, key, rp):
        i = cuda.grid(1)
        if i < out.size:
            # asarray(u): u * 1 is exact in binary64, so this is u's one rounding.
            out[i] = mul(uniform_dyadic(key[0], np.uint64(i)), 1.0, rp)

    @cuda.jit
    def bernoulli(p, out, key, rp):
        i = cuda.grid(1)
        if i < out.size:
            u = mul(uniform_dyadic(key[0], np.uint64(i)), 1.0, rp)
            out[i] = 1.0 if u < p[i] else 0.0
    return uniform, bernoulli


def make_dropout(P: dict):
    """dropout(x, mask, out, p, one, rp): x is the input (forward) or the cotangent
    (gradient: the same linear map)."""
    sub, div = P["subtract"], P["divide"]

    @cuda.jit
    def dropout(x, mask, out, p, one, rp):
        i = cuda.grid(1)
        if i < out.size:
            if mask[i] == one:
                out[i] = div(x[i], sub(one, p, rp), rp)
            else:
                out[i] = 0.0
    return dropout


@cuda.jit
def topk_kernel(x, out, k):
    """out[r, i] = 1 where fewer than k entries of row r beat x[r, i] (module doc), else 0."""
    t = cuda.grid(1)
    n = x.shape[1]
    if t < out.size:
        r = t // n
        i = t % n
        xi = x[r, i]
        ni = xi != xi
        beaten = 0
        for j in range(n):
            xj = x[r, j]
            nj = xj != xj
            if (nj and not ni) or xj > xi or (j < i and (xj == xi or (nj and ni))):
                beaten += 1
        out[r, i] = 1.0 if beaten < k else 0.0


# ----- host launchers ----------------------------------------------------------------------------
def launch_rand_uniform(o, xs, cotangents, route, ctx):
    shape = o.outputs[0].shape
    out = np.empty(int(np.prod(shape, dtype=np.int64)))
    uniform, _ = ctx.compile("draws.draws", lambda: make_draws(ctx.P))
    ctx.launch(uniform, out.size, out, _key(o), ctx.rp)
    return (out.reshape(shape),)


def launch_bernoulli(o, xs, cotangents, route, ctx):
    p = flat(xs[0])
    out = np.empty(p.size)
    _, bernoulli = ctx.compile("draws.draws", lambda: make_draws(ctx.P))
    ctx.launch(bernoulli, out.size, p, out, _key(o), ctx.rp)
    return (out.reshape(np.shape(xs[0])),)


def launch_dropout(o, xs, cotangents, route, ctx):
    shape = np.shape(xs[0])
    mask, p = flat(xs[1]), float(xs[2])
    one = float(ctx.round(1.0))                           # xp.ones_like
    v = flat(xs[0]) if route == "forward" else flat(ctx.cotangents(o, cotangents)[0])
    out = np.empty(v.size)
    kern = ctx.compile("draws.dropout", lambda: make_dropout(ctx.P))
    ctx.launch(kern, out.size, v, mask, out, p, one, ctx.rp)
    if route == "forward":
        return (out.reshape(shape),)
    return out.reshape(shape), None, None


def launch_topk(o, xs, cotangents, route, ctx):
    axis = o.attrs.axis
    moved = np.moveaxis(np.asarray(xs[0], dtype=np.float64), axis, -1)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]))
    out = np.zeros_like(rows)
    ctx.launch(topk_kernel, out.size, rows, out, int(o.attrs.k))
    return (np.moveaxis(out.reshape(moved.shape), -1, axis),)


_f = frozenset
# Test instances (kernels.base.Instance): each operator at its defaults in every format and
# sample kind; other shapes, k and keys (both ends of the key range); the directed modes
# (FEW32: binary32 and the emulated flavour).
_KEY_MAX = 2 ** 64 - 1


def _directed(attrs):
    return Instance(attrs, formats=FEW32, kinds=("ordinary",), routes=("forward",),
                    modes=DIRECTED)


def _keyed(kinds):
    return tuple(Instance({"shape": (2, 4), "key": key}, f"2x4-key{name}", kinds=kinds)
                 for key, name in ((7, "7"), (_KEY_MAX, "max")))


KERNELS = (
    # Two roundings per kept entry (1 - p, the quotient); the gradient is the same map.
    Kernel("dropout", "mask",
           Contract(TRACED, TRACED, None),
           launch_dropout,
           tests=(Instance({}), Instance({"shape": (2, 3)}, formats=FEW32, kinds=("special",)),
                  _directed({}))),
    # Comparisons only: exact (0 or 1) in every format and mode.
    Kernel("topKMask", "mask", Contract(TRACED, None, None), launch_topk,
           tests=(Instance({}),
                  Instance({"shape": (2, 5), "axis": 1, "k": 2}, formats=FEW32,
                           kinds=("edges", "special")),
                  Instance({"shape": (4, 3), "axis": 0, "k": 3}, formats=FEW32,
                           kinds=("special",)),
                  Instance({"shape": (3,), "k": 0}, "3-k0", formats=("bfloat16",),
                           kinds=("ordinary",)),
                  Instance({"shape": (3,), "k": 3}, "3-k3", formats=("bfloat16",),
                           kinds=("special",)),
                  _directed({"shape": (5,), "k": 2}))),
    # The draw's one rounding decides the comparison: the 0/1 result is not within any ulp
    # of the exact rule's (single=False), but bitwise equal to the emulated one.
    Kernel("bernoulliMask", "draw", Contract(_f({"multiply"}), None, False),
           launch_bernoulli,
           tests=(Instance({}),) + _keyed(("ordinary", "edges"))
           + (_directed({"shape": (6,), "key": _KEY_MAX}),)),
    # One rounding of an exact dyadic: 0.5 ulp in round to nearest even.
    Kernel("randUniform", "draw", Contract(_f({"multiply"}), None, True),
           launch_rand_uniform,
           tests=(Instance({}),) + _keyed(("ordinary",))
           + (_directed({"shape": (6,), "key": _KEY_MAX}),)),
)
