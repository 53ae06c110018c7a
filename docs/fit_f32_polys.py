"""Fit the float32 polynomial coefficients of ``qtrace/kernels/mathlib_f32.py``.

Development tool (NumPy only, not imported by the package).  Each target is a power
series summed exactly enough in float64; the fit is a weighted minimax approximation
by Lawson's iteratively reweighted least squares on 4000 Chebyshev nodes, and the
coefficients are rounded to float32 one at a time, the higher ones refitted
after each rounding (the error printed is that of the rounded
coefficients, evaluated in float64, relative to the function the kernel returns).

Run: ``python docs/fit_f32_polys.py [NAME ...]``.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np

ONLY = set(sys.argv[1:])  # names to fit (default: all)


def series(t, terms):
    """sum_k terms(k) * t**k for k = 0.. until negligible (t small, terms decreasing)."""
    out = np.zeros_like(t)
    for k in range(40):
        out += terms(k) * t ** k
    return out


def tan_coeffs(n):
    """Taylor coefficients t_k of tan(x) = sum t_k x^(2k+1), k < n (exact Bernoulli numbers)."""
    B = [Fraction(1)]
    for m in range(1, 2 * n + 2):
        B.append(-sum(math.comb(m + 1, j) * B[j] for j in range(m)) / (m + 1))
    return [float((-1) ** k * 4 ** (k + 1) * (4 ** (k + 1) - 1) * B[2 * k + 2]
                  / math.factorial(2 * k + 2)) for k in range(n)]


def lawson(xs, target, weight, deg, iters=300):
    """Coefficients c (lowest first) minimising max |weight * (poly(xs) - target)|."""
    V = np.vander(xs, deg + 1, increasing=True)
    w = np.full(xs.size, 1.0 / xs.size)
    for _ in range(iters):
        sw = np.sqrt(w) * weight
        c, *_ = np.linalg.lstsq(V * sw[:, None], target * sw, rcond=None)
        err = np.abs(weight * (V @ c - target))
        w = w * err
        w /= w.sum()
    return c


def fit(name, lo, hi, target, weight, deg, outer):
    """Print float32 coefficients and the relative error of outer(x, poly)."""
    if ONLY and name not in ONLY:
        return
    n = 4000
    xs = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (np.arange(n) + 0.5) / n)
    # round one coefficient at a time (lowest first), refitting the others to absorb
    # its rounding error
    c32 = []
    for i in range(deg + 1):
        fixed = np.polyval(c32[::-1], xs) if c32 else 0.0
        tail = lawson(xs, (target(xs) - fixed) / xs ** i, weight(xs) * np.abs(xs) ** i, deg - i)
        c32.append(float(np.float32(tail[0])))
    dense = np.linspace(lo, hi, 200001)
    dense = dense[dense != 0]
    exact = outer(dense, target(dense))
    approx = outer(dense, np.polyval(c32[::-1], dense))
    rel = np.max(np.abs(approx / exact - 1))
    print(f"{name} = ({', '.join(repr(v) for v in c32)})  # rel err {rel:.2g} "
          f"(2^{math.log2(rel):.1f})")


def main():
    ln2 = math.log(2.0)
    fac = math.factorial
    # exp(r) = 1 + r + r^2 P(r), |r| <= 0.35
    fit("_EXP", -0.35, 0.35, lambda r: series(r, lambda k: 1 / fac(k + 2)),
        lambda r: r * r, 4, lambda r, p: 1 + r + r * r * p)
    # 2^r = 1 + r Q(r), |r| <= 0.5
    fit("_EXP2", -0.5, 0.5, lambda r: series(r, lambda k: ln2 ** (k + 1) / fac(k + 1)),
        lambda r: np.abs(r), 6, lambda r, p: 1 + r * p)
    # expm1(r) = r + r^2/2 + r^3 Q(r), |r| <= 0.35 (relative to expm1 ~ r)
    fit("_EXPM1", -0.35, 0.35, lambda r: series(r, lambda k: 1 / fac(k + 3)),
        lambda r: r * r, 4, lambda r, p: r + r * r / 2 + r ** 3 * p)
    # 2 atanh(s) = 2 s + s z R(z), z = s^2 <= 0.0295 (s <= (sqrt2-1)/(sqrt2+1))
    fit("_LOG", 0.0, 0.0295, lambda z: series(z, lambda k: 2 / (2 * k + 3)),
        lambda z: z, 3, lambda z, p: 2 + z * p)
    # sin(r) = r + r^3 S(z), z = r^2, |r| <= 0.83
    fit("_SIN", 0.0, 0.83 ** 2, lambda z: series(z, lambda k: (-1) ** (k + 1) / fac(2 * k + 3)),
        lambda z: z, 2, lambda z, p: 1 + z * p)
    # cos(r) = 1 - z/2 + z^2 C(z)
    fit("_COS", 0.0, 0.83 ** 2, lambda z: series(z, lambda k: (-1) ** k / fac(2 * k + 4)),
        lambda z: z * z, 2, lambda z, p: 1 - z / 2 + z * z * p)
    # sinh(x) = x + x^3 H(z), z = x^2, |x| <= 2
    fit("_SINH", 0.0, 4.0, lambda z: series(z, lambda k: 1 / fac(2 * k + 3)),
        lambda z: z, 5, lambda z, p: 1 + z * p)

    # atan(t) = t + t^3 A(z), z = t^2, |t| <= tan(pi/8)
    fit("_ATAN", 0.0, 0.1716, lambda z: series(z, lambda k: (-1) ** (k + 1) / (2 * k + 3)),
        lambda z: z, 5, lambda z, p: 1 + z * p)
    # asin(x) = x + x^3 S(z), z = x^2 <= 1/4
    fit("_ASIN", 0.0, 0.25,
        lambda z: series(z, lambda k: math.comb(2 * k + 2, k + 1) / 4 ** (k + 1) / (2 * k + 3)),
        lambda z: z, 5, lambda z, p: 1 + z * p)
    # tan(r) = r + r^3 T(z), z = r^2, |r| <= 0.84 (pi/4 plus the float32 rounding of k);
    # relative to the r^3 T(z) part (the kernel adds it to r as a float-float): weight 1
    tc = tan_coeffs(41)
    fit("_TAN", 0.0, 0.7056, lambda z: series(z, lambda k: tc[k + 1]),
        lambda z: np.ones_like(z), 7, lambda z, p: p)
    # tanh(x) = x + x^3 P(z), z = x^2, |x| <= 0.625 (tanh's series is tan's with alternating signs)
    fit("_TANH", 0.0, 0.625 ** 2, lambda z: series(z, lambda k: (-1) ** (k + 1) * tc[k + 1]),
        lambda z: z, 4, lambda z, p: 1 + z * p)

    # power's log2: 2 atanh(s) = 2 s + (2/3) s^3 + s^3 z Q(z), z = s^2 <= 0.0295 (Q's error
    # relative to itself: the s^3 z Q term is below 2^-12.5 of the result)
    fit("_LOGQ", 0.0, 0.0295, lambda z: series(z, lambda k: 2 / (2 * k + 5)),
        lambda z: np.ones_like(z), 3, lambda z, p: p)


if __name__ == "__main__":
    main()
