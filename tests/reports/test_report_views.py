"""What a reader sees first: statistics per sample kind (``by_kind``), error buckets, bits of
error, the words on what overflowed inside a route, and the reports' two views -- the
ordinary domain by default, the whole range one switch away (reports/views.py).

Oracles: the draws of a tiny exp task evaluated here with numerics.emulated and measured
against mpmath at 300 bits with exact rationals (ulp errors, exceptional classes, error
buckets and bits of error written out again below, independently of numerics.metrics);
formats.ordinal for a hand count of bits; ln(max_finite) for where exp overflows.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage.reports import gate, html
from roundoff_coverage.engine import evaluate, measure, results, rows, runner
from roundoff_coverage.reports import summary, views
from roundoff_coverage.reports.cli import main
from roundoff_coverage.engine.measuring import measure_port

BF = formats.get("bfloat16")
P, EMAX, QMIN = BF.precision, BF.emax, BF.qmin
OMEGA = Fraction(2) ** (EMAX + 1)             # one ulp past max_finite (IEEE bfloat16)
MAX = Fraction(BF.max_finite_exact)
NAN, POS_INF, NEG_INF = "nan", "inf", "-inf"


# ----- an independent measurement of bfloat16 results ------------------------------------------

def _floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if a >= Fraction(2) ** e else e - 1


def _exact(x: float, c: float | None = None):
    """exp(x) (forward) or c * exp(x) (exp's gradient) as a Fraction, or NAN / POS_INF /
    NEG_INF; magnitudes beyond 2**300 or below 2**-300 stand in for larger or smaller ones
    (both far outside bfloat16, where they measure alike)."""
    c = 1.0 if c is None else c
    if math.isnan(x) or math.isnan(c):
        return NAN
    if math.isinf(x):
        if x < 0:
            return Fraction(0)
        return NAN if c == 0 else (POS_INF if c > 0 else NEG_INF)
    if c == 0:
        return Fraction(0)
    with mpmath.workprec(300):
        v = mpmath.exp(mpmath.mpf(x)) * mpmath.mpf(c)
        if abs(v) > mpmath.mpf(2) ** 300:
            mag = Fraction(2) ** 300
        elif abs(v) < mpmath.mpf(2) ** -300:
            mag = Fraction(1, 2 ** 300)
        else:
            m, e = abs(v).man_exp
            mag = Fraction(int(m)) * Fraction(2) ** int(e)
    return mag if v > 0 else -mag


def _ulp_error(comp: float, ex) -> float:
    """(computed - exact) / ulp(exact) under the extended-format convention (inf computed
    stands for +-OMEGA, exact values clamped into [-OMEGA, OMEGA]); 0 for NaN/NaN and for
    the same infinity; NaN where no error is defined."""
    if ex == NAN:
        return 0.0 if math.isnan(comp) else math.nan
    if ex in (POS_INF, NEG_INF):
        return 0.0 if math.isinf(comp) and (comp > 0) == (ex == POS_INF) else math.nan
    if math.isnan(comp):
        return math.nan
    x = max(-OMEGA, min(OMEGA, ex))
    c = (OMEGA if comp > 0 else -OMEGA) if math.isinf(comp) else Fraction(comp)
    q = QMIN if x == 0 else max(min(_floor_log2(abs(x)), EMAX) - P + 1, QMIN)
    return float((c - x) / Fraction(2) ** q)


def _outcome(comp: float, ex) -> str:
    """numerics.metrics' class names, for an IEEE format with infinities."""
    if ex == NAN:
        return "ok" if math.isnan(comp) else "missed_nan"
    if ex in (POS_INF, NEG_INF):
        same = math.isinf(comp) and (comp > 0) == (ex == POS_INF)
        if math.isinf(comp):
            return "ok" if same else "inf_sign"
        if math.isnan(comp):
            return "nan_from_inf"
        return "overflow_to_max" if abs(Fraction(comp)) == MAX and (comp > 0) == (
            ex == POS_INF) else "missed_inf"
    if math.isnan(comp):
        return "nan_from_finite"
    if math.isinf(comp):
        return "overflow_to_inf"
    if comp == 0 and ex != 0:
        return "wrong_zero_sign" if (math.copysign(1, comp) > 0) != (ex > 0) else \
            "underflow_to_zero"
    if abs(ex) > MAX and abs(Fraction(comp)) == MAX:
        return "overflow_to_max"
    return "ok"


def _round_nearest_even(x: Fraction) -> float:
    """x rounded to nearest-even into bfloat16, by hand: +-inf from the midpoint above
    max_finite on."""
    if x == 0:
        return 0.0
    a = abs(x)
    q = max(_floor_log2(a) - P + 1, QMIN)
    n = a / Fraction(2) ** q
    whole = n.numerator // n.denominator
    rest = n - whole
    whole += rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1)
    v = whole * Fraction(2) ** q
    if v > MAX:
        return math.copysign(math.inf, x)
    return float(v) if x > 0 else -float(v)


def _bits(comp: float, ex) -> float:
    """Bits of error counted by hand with formats.ordinal: log2(1 + |ord(computed) -
    ord(RN(exact))|), +-inf one ordinal past +-max_finite, at most 16 bits."""
    e = _ulp_error(comp, ex)
    if math.isnan(e):
        return math.nan
    if not isinstance(ex, Fraction):
        return 0.0                                     # NaN/NaN or the same infinity
    top = int(formats.ordinal(np.array([BF.max_finite]), BF)[0])

    def ordinal(v):
        if math.isinf(v):
            return top + 1 if v > 0 else -(top + 1)
        return int(formats.ordinal(np.array([v]), BF)[0])
    rn = _round_nearest_even(max(-OMEGA, min(OMEGA, ex)))
    return min(math.log2(1 + abs(ordinal(comp) - ordinal(rn))), 16.0)


def _bucket(e: float) -> int:
    """The index of |e| among rows.BUCKET_LABELS, written out."""
    a = abs(e)
    if math.isnan(a):
        return 8
    for i, edge in enumerate((0.0, 0.5, 1.0, 2.0, 4.0, 16.0, 256.0)):
        if a <= edge:
            return i
    return 7


def _stats(comps, exacts) -> dict:
    errs = [_ulp_error(c, x) for c, x in zip(comps, exacts)]
    bits = [_bits(c, x) for c, x in zip(comps, exacts)]
    ok = np.array([abs(e) for e in errs if not math.isnan(e)])
    okb = [b for b in bits if not math.isnan(b)]
    counts = [0] * 9
    for e in errs:
        counts[_bucket(e)] += 1
    outcomes = {}
    for c, x in zip(comps, exacts):
        o = _outcome(c, x)
        if o != "ok":
            outcomes[o] = outcomes.get(o, 0) + 1
    return {"samples": len(errs), "unmeasured": len(errs) - ok.size,
            "max_ulp": float(ok.max()), "p99_ulp": float(np.percentile(ok, 99)),
            "mean_ulp": float(ok.mean()), "max_bits": max(okb), "mean_bits": sum(okb) / len(okb),
            "exceptional": outcomes, "buckets": counts}


def _same(got: dict, want: dict, where: str):
    for k in ("samples", "unmeasured", "exceptional", "buckets"):
        assert got[k] == want[k], (where, k, got[k], want[k])
    for k in ("max_ulp", "p99_ulp", "mean_ulp", "max_bits", "mean_bits"):
        # The run reads exact values through binary64 (2**-45 ulp in bfloat16) and clamps
        # those below 2**(qmin-64): agreement to 1e-9 ulp, far below any rounding's effect.
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), (where, k)


@pytest.fixture(scope="module")
def exp_task():
    """The first exp task in bfloat16 (every sample kind, 3 draws), its rows and draws."""
    sel = runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward", "gradient"),
                           draws=3)
    task = runner.plan(sel)[0]
    out, _ = evaluate.evaluate(task)
    d = evaluate.draw(task, task.build(), task.fmt)
    return task, {r["route"]: r for r in out}, d


def test_per_kind_statistics_equal_an_independent_measurement(exp_task):
    task, by_route, d = exp_task
    assert d.kinds == ["ordinary", "edges", "special", "magnitudes"]
    rule = d.op.rule(numerics.emulated(BF))
    whole = {"forward": ([], []), "gradient": ([], [])}
    for k, kind in enumerate(d.kinds):
        (x,) = d.inputs[k]
        (c,) = d.cotangents[k]
        x, c = np.asarray(x, np.float64).reshape(-1), np.asarray(c, np.float64).reshape(-1)
        (y,) = rule.forward((x,))
        (g,) = rule.backward((x,), (c,))
        cases = {"forward": (np.asarray(y, np.float64).reshape(-1), [_exact(v) for v in x]),
                 "gradient": (np.asarray(g, np.float64).reshape(-1),
                              [_exact(v, w) for v, w in zip(x, c)])}
        for route, (comp, ex) in cases.items():
            _same(by_route[route]["by_kind"][kind], _stats(list(comp), ex), f"{route} {kind}")
            whole[route][0].extend(comp)
            whole[route][1].extend(ex)
    for route, (comp, ex) in whole.items():
        want = _stats(comp, ex)
        _same({k: by_route[route][k] for k in rows.KIND_STATS}, want, f"{route} whole")
        assert by_route[route]["samples"] == sum(
            s["samples"] for s in by_route[route]["by_kind"].values())
    # The oracle met exceptional outcomes: the edges reach bfloat16's overflow and
    # underflow thresholds, the ordinary domain neither.
    for r in by_route.values():
        assert {"overflow_to_inf", "underflow_to_zero"} <= set(r["by_kind"]["edges"]
                                                                ["exceptional"])
        assert r["by_kind"]["ordinary"]["exceptional"] == {}


def test_buckets_add_up_to_the_samples(exp_task, tmp_path):
    _, by_route, _ = exp_task
    sel = runner.Selection(ops=("softmax", "add"), formats=("float8_e4m3fn",), draws=1)
    out = tmp_path / "r.json"
    runner.run(sel, str(out), jobs=1, progress=False)
    measured = [r for r in json.loads(out.read_text())["rows"] + list(by_route.values())
                if r["status"] == "ok" and r["buckets"] is not None]
    assert len(measured) > 6
    for r in measured:
        assert sum(r["buckets"]) == r["samples"] and r["buckets"][-1] == r["unmeasured"]
        assert len(r["buckets"]) == len(rows.BUCKET_LABELS)
        for kind, s in r["by_kind"].items():
            assert sum(s["buckets"]) == s["samples"], kind
        assert [sum(col) for col in zip(*(s["buckets"] for s in r["by_kind"].values()))] \
            == r["buckets"]


def test_bits_of_error_against_a_hand_count_with_ordinals():
    # Exact 1.0: computed values k ordinals away give log2(1 + k) bits.
    fmt = formats.get("binary32")
    one = int(formats.ordinal(np.array([1.0]), fmt)[0])
    ks = np.array([0, 1, 3, 7, 1000, -5])
    comp = formats.from_ordinal(one + ks, fmt).astype(np.float64)
    row = rows.empty()
    measure_port(row, comp, np.ones(ks.size), fmt, None)
    assert row["max_bits"] == math.log2(1 + 1000)
    assert row["mean_bits"] == pytest.approx(np.mean(np.log2(1 + np.abs(ks))), rel=1e-15)
    # An error of ~1e44 ulp (max_finite computed for a tiny exact value) reads as nearly
    # every bit of binary32 wrong: the ordinals of max_finite and of the value nearest the
    # exact one differ by about 2**31.
    tiny = 2.0 ** -140
    row = rows.empty()
    measure_port(row, np.array([fmt.max_finite]), np.array([tiny]), fmt, None)
    top = int(formats.ordinal(np.array([fmt.max_finite]), fmt)[0])
    near = int(formats.ordinal(np.array([tiny]), fmt)[0])     # tiny is a subnormal value
    assert row["max_ulp"] > 1e44
    assert row["max_bits"] == math.log2(1 + top - near) and 30 < row["max_bits"] <= 32


def test_inside_says_where_exp_overflowed_and_by_input_has_every_sample(tmp_path):
    sel = runner.Selection(ops=("exp",), formats=("binary32",), routes=("gradient",), draws=2)
    out = tmp_path / "r.json"
    runner.run(sel, str(out), jobs=1, progress=False)
    rows_ = [r for r in json.loads(out.read_text())["rows"] if r["status"] == "ok"]
    hit = [r for r in rows_ if r["inside"].get("overflow")]
    assert hit
    for r in hit:
        over = r["inside"]["overflow"]
        # exp(x) overflows binary32 from x >= ln(max_finite + ulp/2) = 88.7228...: an
        # overflow inside the gradient (cotangent * exp(x) finite) starts no lower.
        assert over["input"] == "x" and over["min_abs_input"] >= 88.72283935546875
        words = views.inside_words(r["inside"], r["format"])
        assert words[0].startswith(f"overflow inside at |x| ≥ {over['min_abs_input']:.4g} "
                                   f"in binary32 ({over['samples']} sample")
    for r in rows_:
        pts = r["by_input"]["points"]
        assert r["by_input"]["input"] == "x" and len(pts) <= rows.POINTS_MAX
        assert [p[0] for p in pts] == sorted(p[0] for p in pts)
        # Every sample with a measurable error, but those of NaN inputs (special values).
        measurable = r["samples"] - r["unmeasured"]
        assert measurable - r["by_kind"]["special"]["samples"] <= len(pts) <= measurable
        kinds = r["by_input"]["kinds"]
        assert {kinds[p[2]] for p in pts} == set(r["by_kind"])


def test_summary_shows_the_ordinary_domain_and_the_switch_the_whole_range(capsys, tmp_path):
    out = tmp_path / "r.json"
    argv = ["run", "--ops", "exp", "--formats", "binary32", "--routes", "gradient",
            "--samples", "2", "--jobs", "1", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert "worst routes by max |error| (ulp) on the ordinary domain" in text
    assert "overflow inside" not in text
    # Each listed maximum is the row's ordinary-domain one; the whole range's beside it.
    top = summary.worst(doc["rows"], view="ordinary")
    assert [v for v, _ in top] == sorted(
        (r["by_kind"]["ordinary"]["max_ulp"] for r in doc["rows"]), reverse=True)
    line = next(ln for ln in text.splitlines() if ln.startswith("exp[2x3]"))
    r = next(r for r in doc["rows"] if r["instance"] == "2x3")
    assert f"{r['by_kind']['ordinary']['max_ulp']:.4g}" in line.split()
    assert f"{r['max_ulp']:.4g}" in line.split()

    assert main(argv + ["--whole-range"]) == 0
    text = capsys.readouterr().out
    assert "worst routes by max |error| (ulp) on the whole range" in text
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("exp[2x3]"))
    assert lines[i].split()[5] == f"{r['max_ulp']:.4g}"
    assert lines[i + 1].strip().startswith("overflow inside at |x| >= 88.72 in binary32")


def _report(tmp_path, doc):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "rep"
    html.build(str(path), str(out))
    return path, out


def test_the_html_opens_on_the_ordinary_domain(exp_task, tmp_path):
    task, by_route, _ = exp_task
    sel = runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward", "gradient"),
                           draws=3)
    doc = results.document(list(by_route.values()), sel)
    _, out = _report(tmp_path, doc)
    index = (out / "index.html").read_text()
    assert '<body data-view="ordinary">' in index
    assert 'value="ordinary" checked>' in index and 'value="whole">' in index
    data = json.loads((out / "assets" / "rows.js").read_text()
                      .removeprefix("window.ROUNDOFF_TABLE = ").rstrip().rstrip(";"))
    assert data["view"] == "ordinary"
    keys = [c["key"] for c in data["columns"]]
    for i, raw in enumerate(doc["rows"]):
        ordinary = dict(zip(data["viewColumns"], data["ordinary"][i]))
        assert ordinary["max_ulp"] == raw["by_kind"]["ordinary"]["max_ulp"]
        assert data["rows"][i][keys.index("max_ulp")] == raw["max_ulp"]
    # Cells drawn in their ordinary colours, the whole range's beside them for the switch.
    cells = re.findall(r'<rect [^>]*fill="([^"]+)" data-ordinary="([^"]+)" '
                       r'data-whole="([^"]+)"', index)
    assert cells and all(f == o for f, o, _ in cells) and any(o != w for _, o, w in cells)
    page = (out / "ops" / "exp.html").read_text()
    first = page.index("<h5>Errors by sample kind</h5>")
    assert page.index("<b>ordinary</b>", first) < page.index("edges", first)
    assert "Samples by |error|" in page and "bits</td>" in page


def test_a_results_file_of_the_previous_version_still_validates_and_renders(exp_task,
                                                                            tmp_path):
    _, by_route, _ = exp_task
    sel = runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward", "gradient"),
                           draws=3)
    doc = results.document(list(by_route.values()), sel)
    new = tmp_path / "new.json"
    new.write_text(results.dumps(doc))
    for r in doc["rows"]:
        for name in ("by_kind", "buckets", "max_bits", "mean_bits", "inside", "by_input"):
            del r[name]
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    path, out = _report(old_dir, doc)
    results.check(results.read(str(path)), str(path))            # the gate's strict check
    assert not gate.compare(gate.read(str(path), "baseline"), gate.read(str(new))).failed
    index = (out / "index.html").read_text()
    assert '<body data-view="whole">' in index and "disabled" in index
    assert "no statistics per sample kind" in index
    assert "No statistics per sample kind" in (out / "ops" / "exp.html").read_text()


@pytest.mark.parametrize("change,fragment", [
    ({"buckets": [1, 2, 3]}, "buckets must be a list of 9 non-negative integer counts"),
    ({"buckets": [0, 1, 0, 0, 0, 0, 0, 0, 0]}, "buckets add up to 1, not to the"),
    ({"by_kind": {"ordinary": {"samples": 2, "max_ulp": -1}}},
     "by_kind ['ordinary'] max_ulp must be a number >= 0"),
    ({"by_kind": {"ordinary": {"samples": 3, "buckets": [3, 0, 0, 0, 0, 0, 0, 0, 1]}}},
     "by_kind ['ordinary'] buckets add up to 4, not to the 3 samples"),
    ({"max_bits": 1.0, "mean_bits": 2.0}, "mean_bits 2.0 exceeds max_bits 1.0"),
])
def test_malformed_new_fields_are_named(exp_task, change, fragment):
    _, by_route, _ = exp_task
    row = dict(json.loads(json.dumps(results.clean(by_route["forward"]))), **change)
    said = [p for _, p in results.field_problems(row)]
    assert any(fragment in p for p in said), said


def test_measure_prints_a_rate_with_a_unit_and_resolves_the_signed_extremum():
    assert measure.rate(50_200_000 * 85.6, 85.6) == "50.2 M inputs/s"
    assert measure.rate(20000, 6.97) == "2.87 k inputs/s"
    assert measure.rate(12, 2.0) == "6 inputs/s"
    o = measure.measure("numpy.exp", "bfloat16", samples=None, jobs=1)
    r = o.row
    side = "max_signed_ulp" if r["worst"]["ulp"] > 0 else "min_signed_ulp"
    assert r[side] == r["worst"]["ulp"] and abs(r[side]) == r["max_ulp"]
    assert max(abs(r["min_signed_ulp"]), abs(r["max_signed_ulp"])) == r["max_ulp"]
    assert " k inputs/s)" in measure.text(o) and "0.0 M" not in measure.text(o)
