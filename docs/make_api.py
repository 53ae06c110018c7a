"""Write ``docs/api.md``: every public name of ``qtrace``, ``qtrace.linalg``, ``qtrace.fft``
and ``qtrace.random``, with its NumPy and Array API counterparts and what it does not accept.

Run from the repository root::

    python docs/make_api.py           # rewrite docs/api.md
    python docs/make_api.py --check   # exit 1 if docs/api.md is out of date

Sources: each module's ``__all__``, the first paragraph of each docstring, and a
comparison of signatures: a parameter of the NumPy function that qtrace's lacks is
listed as not accepted (for ufuncs, NumPy's ufunc keywords). Array API names are those
of the 2024.12 standard (its main namespace and its ``linalg`` and ``fft`` extensions).
``tests/unit/test_api_docs.py`` fails when ``docs/api.md`` is out of date.

Example:
    >>> import make_api
    >>> make_api.numpy_counterpart(qt, "sum")
    'numpy.sum'
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
API_MD = ROOT / "docs" / "api.md"
sys.path.insert(0, str(ROOT))

import qtrace as qt  # noqa: E402  (the checkout's qtrace, not an installed one)

ARRAY_API_VERSION = "2024.12"
ARRAY_API = {
    "qtrace": """
        e inf nan newaxis pi
        arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones
        ones_like tril triu zeros zeros_like
        astype can_cast finfo iinfo isdtype result_type
        bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128
        abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift
        bitwise_invert bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh
        divide equal exp expm1 floor floor_divide greater greater_equal hypot imag isfinite isinf
        isnan less less_equal log log1p log2 log10 logaddexp logical_and logical_not logical_or
        logical_xor maximum minimum multiply negative nextafter not_equal positive pow real
        reciprocal remainder round sign signbit sin sinh square sqrt subtract tan tanh trunc
        take take_along_axis __array_namespace_info__ matmul matrix_transpose tensordot vecdot
        broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims repeat reshape
        roll squeeze stack tile unstack
        argmax argmin count_nonzero nonzero searchsorted where
        unique_all unique_counts unique_inverse unique_values argsort sort
        cumulative_prod cumulative_sum max mean min prod std sum var all any diff
        __array_api_version__""",
    "qtrace.linalg": """
        cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm matrix_power matrix_rank
        matrix_transpose outer pinv qr slogdet solve svd svdvals tensordot trace vecdot
        vector_norm""",
    "qtrace.fft": """
        fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftfreq rfftfreq fftshift
        ifftshift""",
    "qtrace.random": "",
}
# keywords every NumPy ufunc takes besides its operands
UFUNC_KEYWORDS = ("out", "where", "casting", "order", "dtype", "subok")

# Why a NumPy function has no qtrace counterpart, by kind (the last section of api.md);
# a function in none of these is simply not implemented yet.
NOT_PROVIDED = {
    "file and text input/output: read with NumPy and convert with `qt.asarray`; the writers "
    "(`np.save`, `np.savetxt`, ...) accept tensors and compute their values": """
        fromfile fromregex fromstring frombuffer fromiter genfromtxt load loadtxt save savetxt
        savez savez_compressed""",
    "printing and formatting: NumPy's functions accept tensors (they compute the values)": """
        array2string array_repr array_str base_repr binary_repr format_float_positional
        format_float_scientific get_printoptions printoptions set_printoptions""",
    "data types and Python objects: qtrace's dtypes are NumPy's, use NumPy's functions": """
        can_cast common_type issubdtype iterable min_scalar_type mintypecode promote_types
        typename""",
    "NumPy's own configuration, memory layout and introspection": """
        get_include getbufsize setbufsize geterr geterrcall seterr seterrcall show_config
        show_runtime test info isfortran asfortranarray require may_share_memory shares_memory
        nested_iters frompyfunc einsum_path""",
    "dates and business days: qtrace has no datetime dtypes": """
        busday_count busday_offset is_busday datetime_as_string datetime_data isnat""",
    "the `numpy.matrix` class": "asmatrix bmat",
    "deprecated by NumPy (use `vstack`)": "row_stack",
}


def _numpy_home(module: ModuleType) -> list:
    """Where NumPy keeps the counterparts of ``module``'s names, most specific first."""
    name = module.__name__
    if name == "qtrace.linalg":
        return [np.linalg, np]
    if name == "qtrace.fft":
        return [np.fft]
    if name == "qtrace.random":
        return [np.random.Generator, np.random]
    return [np]


def _qualname(home) -> str:
    return "numpy.random.Generator" if home is np.random.Generator else home.__name__


def numpy_counterpart(module: ModuleType, name: str) -> str | None:
    """``numpy...name`` for the NumPy object of the same name, or the first ``numpy.X``
    that ``name``'s docstring names, or None."""
    for home in _numpy_home(module):
        if callable(getattr(home, name, None)) and not name.startswith("_"):
            return f"{_qualname(home)}.{name}"
    doc = summary(getattr(module, name))
    if "``numpy." in doc:
        ref = doc.split("``numpy.", 1)[1].split("``", 1)[0].split("(", 1)[0]
        obj = np
        for part in ref.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            return "numpy." + ref
    return None


def summary(obj) -> str:
    """The first paragraph of ``obj``'s docstring, on one line."""
    doc = inspect.getdoc(obj) if callable(obj) or isinstance(obj, ModuleType) else None
    if not doc:
        return ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _parameters(fn) -> list | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def not_accepted(module: ModuleType, name: str, numpy_name: str | None) -> str:
    """The parameters of the NumPy function that qtrace's does not take, as text."""
    if numpy_name is None:
        return ""
    ours = getattr(module, name)
    if module is qt.random:
        ours = getattr(qt.random.Generator, name, None)
        if ours is None or not numpy_name.startswith("numpy.random.Generator."):
            return ""
    theirs = np
    for part in numpy_name.split(".")[1:]:
        theirs = getattr(theirs, part)
    mine = _parameters(ours)
    if mine is None or not callable(ours):
        return ""
    if any(p.kind in (p.VAR_KEYWORD,) for p in mine):
        return "(takes **kwargs: see its docstring)"
    names = {p.name for p in mine}
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in mine)
    if isinstance(theirs, np.ufunc):
        missing = [k for k in UFUNC_KEYWORDS if k not in names]
    else:
        params = _parameters(theirs)
        if params is None:
            return "(NumPy's signature is not inspectable)"
        missing = [p.name for k, p in enumerate(params)
                   if p.name not in names and p.name != "self"
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   and not (k < positional and p.kind != p.KEYWORD_ONLY)]
    return ", ".join(f"`{m}`" for m in missing)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def _describe(obj, kind: str) -> str:
    """A class's or module's summary; a plain value's repr; else its type's summary (a
    settings object's repr would depend on the environment)."""
    if kind in ("class", "module"):
        return summary(obj)
    if kind == "dtype" or obj is None or isinstance(obj, (bool, int, float, str)):
        return repr(obj)
    return summary(type(obj))


def _kind(obj) -> str:
    if isinstance(obj, ModuleType):
        return "module"
    if isinstance(obj, type):
        return "class"
    if isinstance(obj, np.dtype):
        return "dtype"
    return "function" if callable(obj) else "constant"


def section(module: ModuleType) -> list[str]:
    """The markdown of one module: a table of its functions, then its other names."""
    standard = set(ARRAY_API[module.__name__].split())
    names = sorted(module.__all__, key=lambda n: (n.lower().lstrip("_"), n))
    lines = [f"## `{module.__name__}`", "", summary(module), "",
             "| name | NumPy | Array API | what it does | NumPy parameters not accepted |",
             "|---|---|---|---|---|"]
    others = []
    for name in names:
        obj = getattr(module, name)
        kind = _kind(obj)
        if kind != "function":
            others.append(f"| `{name}` | {kind} | {'yes' if name in standard else '—'} | "
                          f"{_cell(_describe(obj, kind))} |")
            continue
        ref = numpy_counterpart(module, name)
        lines.append(f"| `{name}` | {f'`{ref}`' if ref else '—'} | {'yes' if name in standard else '—'} "
                     f"| {_cell(summary(obj))} | {_cell(not_accepted(module, name, ref))} |")
    if others:
        lines += ["", "Other names:", "", "| name | kind | Array API | description |", "|---|---|---|---|",
                  *others]
    missing = sorted(standard - set(module.__all__))
    if missing:
        lines += ["", f"Array API {ARRAY_API_VERSION} names not provided: "
                  + ", ".join(f"`{m}`" for m in missing) + "."]
    return [*lines, ""]


def generate() -> str:
    """The text of ``docs/api.md``."""
    modules = [qt, qt.linalg, qt.fft, qt.random]
    head = [
        "# qtrace API reference",
        "",
        "Generated by `python docs/make_api.py` from the `__all__` lists and docstrings; do not",
        "edit by hand (`tests/unit/test_api_docs.py` fails when this file is out of date).",
        f"NumPy columns as of NumPy {np.lib.NumpyVersion(np.__version__).version}; Array API: the "
        f"{ARRAY_API_VERSION} standard.",
        "",
        "Columns: **NumPy** is the NumPy function of the same meaning; **Array API** says whether",
        "the name belongs to the standard; **NumPy parameters not accepted** lists the NumPy",
        "function's parameters that qtrace's does not take (for ufuncs: the ufunc keywords).",
        "A NumPy function called on a `qt.Tensor` (`np.add(a, b, out=t)`) is dispatched by",
        "NumPy's protocols and may accept more; see the README.",
        "",
        "Modules: " + ", ".join(f"[`{m.__name__}`](#{m.__name__.replace('.', '')})" for m in modules)
        + ".",
        "",
    ]
    body = [line for m in modules for line in section(m)] + not_provided_section()
    return "\n".join(head + body).rstrip() + "\n"


NOT_PROVIDED_HEADING = "## NumPy functions not provided"


def not_provided_section() -> list[str]:
    """The public functions of NumPy's main namespace that ``qtrace`` lacks, grouped by why
    (:data:`NOT_PROVIDED`); calling one on a tensor raises ``TypeError`` naming it."""
    why = {name: reason for reason, names in NOT_PROVIDED.items() for name in names.split()}
    missing = sorted(n for n in dir(np) if not n.startswith("_") and not hasattr(qt, n)
                     and callable(getattr(np, n)) and not inspect.isclass(getattr(np, n)))
    groups: dict = {}
    for name in missing:
        groups.setdefault(why.get(name, "not implemented yet"), []).append(name)
    public = [n for n in dir(np) if not n.startswith("_") and callable(getattr(np, n))
              and not inspect.isclass(getattr(np, n))]
    lines = [NOT_PROVIDED_HEADING, "",
             f"Of NumPy's {len(public)} public functions (its main namespace, classes aside), "
             f"qtrace lacks {len(missing)}. On a `qt.Tensor` each raises `TypeError` naming it "
             "(qtrace never runs NumPy on a tensor's values behind your back).", ""]
    for reason in [*NOT_PROVIDED, "not implemented yet"]:
        if groups.get(reason):
            lines += [f"- {reason[0].upper() + reason[1:]}: "
                      + ", ".join(f"`{n}`" for n in groups[reason]) + ".", ""]
    return lines


def without_numpy_columns(text: str) -> str:
    """``text`` (an ``api.md``) without what depends on the installed NumPy's version: the
    NumPy columns of the function tables, the line naming that version and the section of
    NumPy functions not provided."""
    out = []
    for line in text.splitlines():
        if line == NOT_PROVIDED_HEADING:   # (the rest is NumPy's namespace less qtrace's)
            break
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) == 5:
            line = " | ".join([cells[0], cells[2], cells[3]])
        elif line.startswith("NumPy columns as of NumPy"):
            continue
        out.append(line)
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = API_MD.read_text(encoding="utf-8") if API_MD.exists() else ""
        if current != text:
            print("docs/api.md is out of date: run `python docs/make_api.py`", file=sys.stderr)
            return 1
        return 0
    API_MD.write_text(text, encoding="utf-8")
    print(f"wrote {API_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
