"""The command line, run in-process through ``reports.cli.main`` (and once as a subprocess).

Expected numbers are independent of the code under test: published constants of each format
(IEEE 754-2019 table 3.5, the ml_dtypes and OCP MX documentation), written as literals.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from roundoff_coverage import formats
from conftest import ERROR, run_cli as run

ROOT = pathlib.Path(__file__).resolve().parents[2]


def listing(out: str) -> dict[str, dict[str, str]]:
    """The ``formats`` table as {name: {column: cell}} (cells hold no spaces)."""
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0].split()
    rows = {}
    for line in lines[1:]:
        cells = line.split()
        if len(cells) != len(header):
            break                                      # the note below the table
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def detail(out: str) -> dict[str, list[str]]:
    """The constants of ``formats NAME`` as {constant: [value, rest of the line]}."""
    rows = {}
    for line in out.splitlines():
        key, _, rest = line.strip().partition(" ")
        if key in ("bits", "bias", "precision", "emin", "emax", "max_finite", "min_normal",
                   "min_subnormal", "unit_roundoff", "eta", "finite_count") and key not in rows:
            value, _, tail = rest.strip().partition(" ")
            rows[key] = [value, tail.strip()]
    return rows


def assert_one_error_line(err: str, *fragments: str):
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR), err
    for fragment in fragments:
        assert fragment in lines[0], err


# ----- the listing -----------------------------------------------------------------------------

def test_listing_names_every_catalog_format(capsys):
    status, out, err = run(capsys, "formats")
    assert status == 0 and err == ""
    assert set(listing(out)) == set(formats.CATALOG)


# (name, column, published value).  Each is a known constant of the format, not computed here.
PUBLISHED = [
    ("binary16", "max_finite", 65504.0),
    ("binary16", "min_subnormal", 2.0**-24),
    ("binary16", "unit_roundoff", 2.0**-11),
    ("bfloat16", "min_subnormal", 2.0**-133),
    ("bfloat16", "min_normal", 2.0**-126),
    ("binary32", "max_finite", 3.4028234663852886e38),
    ("float8_e4m3fn", "max_finite", 448.0),
    ("float8_e4m3fn", "min_subnormal", 2.0**-9),
    ("float8_e4m3fnuz", "max_finite", 240.0),
    ("float8_e4m3fnuz", "min_subnormal", 2.0**-10),
    ("float8_e5m2", "max_finite", 57344.0),
    ("float8_e5m2fnuz", "max_finite", 57344.0),
    ("float8_e5m2fnuz", "min_subnormal", 2.0**-17),
    ("float8_e4m3b11fnuz", "max_finite", 30.0),
    ("float6_e2m3fn", "max_finite", 7.5),
    ("float6_e3m2fn", "max_finite", 28.0),
    ("float4_e2m1fn", "max_finite", 6.0),
    ("float4_e2m1fn", "min_subnormal", 0.5),
]


@pytest.mark.parametrize("name,column,expected", PUBLISHED,
                         ids=[f"{n}-{c}" for n, c, _ in PUBLISHED])
def test_listing_shows_published_constants(capsys, name, column, expected):
    _, out, _ = run(capsys, "formats")
    cell = listing(out)[name][column]
    assert float(cell) == pytest.approx(expected, rel=5e-6)     # %.6g: 6 significant digits


@pytest.mark.parametrize("name,count", [
    ("binary32", 2**32 - 2**24),          # all patterns but the 2 * 2**23 with exponent 255
    ("binary16", 2**16 - 2**11),
    ("float8_e4m3fn", 254),               # 0x7f and 0xff are NaN
    ("float8_e4m3fnuz", 255),             # 0x80 is NaN
    ("float4_e2m1fn", 16),                # every pattern is a number
])
def test_listing_shows_exact_finite_counts(capsys, name, count):
    _, out, _ = run(capsys, "formats")
    assert listing(out)[name]["finite_count"] == str(count)


def test_listing_shows_fields_and_encoding(capsys):
    _, out, _ = run(capsys, "formats")
    row = listing(out)["float8_e4m3fnuz"]
    assert (row["bits"], row["exp_bits"], row["man_bits"], row["bias"], row["encoding"],
            row["precision"], row["emin"], row["emax"]) == ("8", "4", "3", "8", "fnuz", "4",
                                                            "-7", "7")


def test_listing_of_wide_formats_has_no_zero_or_inf(capsys):
    # binary256's subnormals and maximum lie outside binary64: shown exactly, never 0 or inf.
    _, out, _ = run(capsys, "formats")
    row = listing(out)["binary256"]
    assert row["min_subnormal"] == "2**-262378"
    assert row["max_finite"].startswith("1.61") and row["max_finite"].endswith("e+78913")
    assert listing(out)["binary128"]["max_finite"] == "1.18973e+4932"     # IEEE 754 table 3.5
    assert listing(out)["binary128"]["min_subnormal"] == "2**-16494"


# ----- one format ------------------------------------------------------------------------------

def test_detail_of_e4m3fn_gives_exact_constants_and_encoding(capsys):
    status, out, err = run(capsys, "formats", "e4m3fn")
    assert status == 0 and err == ""
    assert out.startswith("float8_e4m3fn:")
    rows = detail(out)
    assert rows["max_finite"][0] == "448"
    assert rows["max_finite"][1].startswith("2**8 * 1.75")         # (2 - 2**-2) * 2**8
    assert rows["min_normal"][1].startswith("2**-6")
    assert rows["min_subnormal"][1].startswith("2**-9")
    assert rows["unit_roundoff"][1].startswith("2**-4")
    assert rows["emax"][0] == "8" and rows["emin"][0] == "-6"
    assert rows["finite_count"][0] == "254"
    notes = dict(line.split() for line in out.split("encoding:\n", 1)[1].splitlines())
    assert notes == {"has_inf": "no", "has_nan": "yes", "has_negative_zero": "yes",
                     "saturate": "no", "flush_subnormals": "no", "fits_binary64": "yes"}


def test_detail_gives_each_constant_its_derivation(capsys):
    _, out, _ = run(capsys, "formats", "binary16")
    rows = detail(out)
    for key, (_, derivation) in formats.get("binary16").constants().items():
        assert derivation in rows[key][1], key


@pytest.mark.parametrize("spec,expected", [
    ("bf16", "bfloat16"),                                      # alias
    ("e5m10", "binary16"),                                     # compact spec of a catalog format
    ("exp_bits=5,man_bits=2,encoding=fnuz,bias=16", "float8_e5m2fnuz"),
])
def test_detail_accepts_aliases_and_specs(capsys, spec, expected):
    status, out, _ = run(capsys, "formats", spec)
    assert status == 0 and out.startswith(f"{expected}:")


def test_detail_of_bfloat16_shows_min_subnormal_exactly(capsys):
    _, out, _ = run(capsys, "formats", "bfloat16")
    assert detail(out)["min_subnormal"][1].startswith("2**-133")


def test_detail_of_keyword_spec_outside_catalog(capsys):
    # e5m2 fnuz with the IEEE bias 15: emax = 31 - 15 = 16, max = 1.75 * 2**16 = 114688.
    status, out, _ = run(capsys, "formats", "exp_bits=5,man_bits=2,encoding=fnuz")
    assert status == 0
    assert detail(out)["max_finite"][0] == "114688"


# ----- user formats ----------------------------------------------------------------------------

TOML = """
[formats.mini_e3m1]
exp_bits = 3
man_bits = 1
bias = 3
encoding = "finite"
"""


def test_formats_file_adds_a_user_format(capsys, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(TOML)
    status, out, err = run(capsys, "formats", "--formats-file", str(path))
    assert status == 0 and err == ""
    rows = listing(out)
    assert set(rows) == set(formats.CATALOG) | {"mini_e3m1"}
    assert rows["mini_e3m1"]["source"] == "user"
    assert rows["binary16"]["source"] == "catalog"
    # e3m1, bias 3, no special codes: max 1.5 * 2**(7 - 3) = 24, min subnormal 2**-3,
    # 2**5 = 32 patterns, all finite.
    assert rows["mini_e3m1"]["max_finite"] == "24"
    assert rows["mini_e3m1"]["min_subnormal"] == "0.125"
    assert rows["mini_e3m1"]["finite_count"] == "32"


def test_formats_file_user_format_can_be_named(capsys, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(TOML)
    status, out, _ = run(capsys, "formats", "mini_e3m1", "--formats-file", str(path))
    assert status == 0
    assert out.startswith("mini_e3m1:") and "user format" in out.splitlines()[0]
    assert detail(out)["max_finite"][1].startswith("2**4 * 1.5")


# ----- user errors: one line on stderr, exit status 2 ------------------------------------------

def test_unknown_format_exits_2_naming_close_matches(capsys):
    status, out, err = run(capsys, "formats", "float8_e4m3fz")
    assert status == 2 and out == ""
    assert_one_error_line(err, "float8_e4m3fz", "float8_e4m3fn", "float8_e4m3fnuz")


@pytest.mark.parametrize("content,fragment", [
    ("[formats.x\nexp_bits = \n", "not valid TOML"),
    ("[formats.x]\nexp_bits = 3\n", "missing man_bits"),
    ("[formats.x]\nexp_bits = 'three'\nman_bits = 2\n", "exp_bits must be an integer"),
    ("[formats.half]\nexp_bits = 3\nman_bits = 2\n", "already a catalog name"),
    ("title = 'no formats here'\n", "expected tables [formats.NAME]"),
], ids=["syntax", "missing-field", "bad-field", "catalog-name", "no-table"])
def test_bad_formats_file_exits_2(capsys, tmp_path, content, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    status, out, err = run(capsys, "formats", "--formats-file", str(path))
    assert status == 2 and out == ""
    assert_one_error_line(err, fragment)


def test_formats_file_not_utf8_exits_2(capsys, tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[formats.x]\nexp_bits = 3\nman_bits = 1\nnote = '\xe9'\n")
    status, _, err = run(capsys, "formats", "--formats-file", str(path))
    assert status == 2
    assert_one_error_line(err, "not valid TOML")


def test_missing_formats_file_exits_2(capsys, tmp_path):
    status, _, err = run(capsys, "formats", "--formats-file", str(tmp_path / "absent.toml"))
    assert status == 2
    assert_one_error_line(err, "cannot read")


@pytest.mark.parametrize("argv", [[], ["nosuch"], ["formats", "--bogus"],
                                  ["formats", "binary16", "extra"],
                                  ["formats", "exp_bits=5"], ["formats", "e5m10b"],
                                  ["formats", "exp_bits=40,man_bits=2"],
                                  ["formats", "--formats-file"]],
                         ids=["no-command", "unknown-command", "unknown-option",
                              "extra-argument", "incomplete-keywords", "bad-spec", "too-wide",
                              "option-without-value"])
def test_bad_arguments_exit_2_with_one_line(capsys, argv):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert_one_error_line(err)


def test_help_exits_0(capsys):
    status, out, _ = run(capsys, "formats", "--help")
    assert status == 0 and "--formats-file" in out


def test_module_entry_point_exits_2_without_traceback():
    # The installed console script may be absent in CI; python -m roundoff_coverage is the same main.
    proc = subprocess.run([sys.executable, "-m", "roundoff_coverage", "formats", "bfloat61"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert_one_error_line(proc.stderr, "bfloat61", "bfloat16")
