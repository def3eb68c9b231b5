"""Regenerate src/proctor/envs/builtin/data/math.jsonl, the built-in `math` environment's data.

    .venv/bin/python scripts/make_math_data.py

Deterministic: the same file every time. Each problem has a reference `answer` (LaTeX) and
`equivalent` forms of it that math-verify must accept (tests check that it does), so the
set exercises what string matching gets wrong: fractions, decimals, radicals, pi, sets of
roots, units and unexpanded polynomials. Every answer is computed with sympy.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import sympy

OUT = Path(__file__).resolve().parents[1] / "src/proctor/envs/builtin/data/math.jsonl"
PER_TOPIC = 25


def frac(f: Fraction) -> str:
    if f.denominator == 1:
        return str(f.numerator)
    sign = "-" if f < 0 else ""
    return f"{sign}\\frac{{{abs(f.numerator)}}}{{{f.denominator}}}"


def terminating(f: Fraction) -> bool:
    d = f.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def fraction_forms(f: Fraction) -> list[str]:
    forms = [f"{f.numerator}/{f.denominator}" if f.denominator != 1 else f"{f.numerator}.0"]
    if f.denominator != 1:
        forms.append(f"\\dfrac{{{2 * f.numerator}}}{{{2 * f.denominator}}}")
        if terminating(f):
            forms.append(str(float(f)))
    return forms


def fraction_sum(rng: random.Random) -> dict[str, Any]:
    while True:
        a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
        total = Fraction(a, b) + Fraction(c, d)
        if total.denominator != 1:
            break
    return {
        "problem": f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$ and simplify.",
        "answer": frac(total),
        "equivalent": fraction_forms(total),
    }


def linear(rng: random.Random) -> dict[str, Any]:
    a = rng.choice([2, 3, 4, 5, 6, 7, 8, 9, -2, -3, -4])
    b, c = rng.randint(-20, 20), rng.randint(-20, 20)
    x = Fraction(c - b, a)
    sign = "+" if b >= 0 else "-"
    forms = [f"x = {frac(x)}", *fraction_forms(x)]
    return {
        "problem": f"Solve for $x$: ${a}x {sign} {abs(b)} = {c}$.",
        "answer": frac(x),
        "equivalent": forms,
    }


def quadratic(rng: random.Random) -> dict[str, Any]:
    r1, r2 = rng.sample(range(-9, 10), 2)
    x = sympy.Symbol("x")
    poly = sympy.expand((x - r1) * (x - r2))
    low, high = sorted((r1, r2))
    return {
        "problem": f"Find all real solutions of ${sympy.latex(poly)} = 0$.",
        "answer": f"{low}, {high}",
        "equivalent": [f"{high}, {low}", f"x = {low} \\text{{ or }} x = {high}"],
    }


def radical(rng: random.Random) -> dict[str, Any]:
    k = rng.randint(2, 9)
    m = rng.choice([2, 3, 5, 6, 7, 10, 11])
    n = k * k * m
    return {
        "problem": f"Simplify $\\sqrt{{{n}}}$.",
        "answer": f"{k}\\sqrt{{{m}}}",
        "equivalent": [f"{k} \\cdot \\sqrt{{{m}}}", f"\\sqrt{{{m}}} \\cdot {k}"],
    }


def percent(rng: random.Random) -> dict[str, Any]:
    p = rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 60, 75])
    n = rng.choice([20, 40, 60, 80, 120, 160, 200, 240, 300, 400])
    value = Fraction(p * n, 100)
    return {
        "problem": f"What is ${p}\\%$ of ${n}$?",
        "answer": frac(value),
        "equivalent": fraction_forms(value),
    }


def area(rng: random.Random) -> dict[str, Any]:
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    return {
        "problem": f"A rectangle is ${a}$ cm long and ${b}$ cm wide. What is its area in "
        "square centimetres?",
        "answer": str(a * b),
        "equivalent": [f"{a * b} \\text{{ cm}}^2", f"{a * b}\\ \\mathrm{{cm}}^2"],
    }


def circle(rng: random.Random) -> dict[str, Any]:
    r = rng.randint(2, 40)
    return {
        "problem": f"What is the area of a circle of radius ${r}$? Give an exact answer.",
        "answer": f"{r * r}\\pi",
        "equivalent": [f"\\pi \\cdot {r * r}", f"{r}^2 \\pi"],
    }


def power(rng: random.Random) -> dict[str, Any]:
    while True:
        a, b = rng.randint(1, 9), rng.randint(2, 9)
        if Fraction(a, b).denominator != 1:
            break
    value = Fraction(a, b) ** 2
    return {
        "problem": f"Compute $\\left(\\frac{{{a}}}{{{b}}}\\right)^2$.",
        "answer": frac(value),
        "equivalent": [*fraction_forms(value), f"\\left(\\frac{{{a}}}{{{b}}}\\right)^2"],
    }


def expand(rng: random.Random) -> dict[str, Any]:
    a, b = rng.choice([i for i in range(-9, 10) if i]), rng.choice([i for i in range(-9, 10) if i])
    x = sympy.Symbol("x")
    product = (x + a) * (x + b)
    return {
        "problem": f"Expand ${sympy.latex(product)}$.",
        "answer": sympy.latex(sympy.expand(product)),
        "equivalent": [sympy.latex(product), sympy.latex(sympy.expand(product)).replace(" ", "")],
    }


TOPICS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "fractions": fraction_sum,
    "linear-equations": linear,
    "quadratics": quadratic,
    "radicals": radical,
    "percentages": percent,
    "units": area,
    "circles": circle,
    "powers": power,
    "polynomials": expand,
}


def main() -> None:
    rng = random.Random("proctor-math-v1")
    seen: set[str] = set()
    rows = []
    for _ in range(PER_TOPIC):
        for topic, make in TOPICS.items():
            row = make(rng)
            while row["problem"] in seen:
                row = make(rng)
            seen.add(row["problem"])
            rows.append(
                {
                    "problem": row["problem"],
                    "answer": row["answer"],
                    "topic": topic,
                    "equivalent": row["equivalent"],
                }
            )
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} problems to {OUT}")


if __name__ == "__main__":
    main()
