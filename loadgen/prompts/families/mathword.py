"""Mathematical reasoning (Spec-Bench's GSM8K task): grade-school word problems written for loadgen, their
quantities drawn from a Random seeded by the problem's id (the same numbers on every machine), solved step by step.
The answer is a chain of arithmetic over the prompt's own numbers, which is what makes math predictable to a draft.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from loadgen.prompts.prose_tasks import product_pool
from loadgen.prompts.task import Pool

VARIANTS = 100    # numbers drawn per problem template


def _bakery(r: random.Random) -> str:
    a, d, p = r.randint(20, 90), r.randint(3, 12), r.randint(2, 6)
    return (f"A bakery bakes {a} loaves of bread every morning. Over {d} days it sells all but {p} loaves a day, "
            f"and the unsold loaves are given to a shelter. How many loaves does the shelter receive, and how many "
            f"are sold in total?")


def _train(r: random.Random) -> str:
    v, t, w = r.randint(40, 120), r.randint(2, 6), r.randint(10, 45)
    return (f"A train travels at {v} km per hour for {t} hours, stops for {w} minutes, then travels another "
            f"{t + 1} hours at {v - 10} km per hour. How far does it travel, and how long is the whole trip in "
            "minutes?")


def _savings(r: random.Random) -> str:
    s, m, e = r.randint(5, 40), r.randint(3, 12), r.randint(20, 200)
    return (f"Maya saves {s} dollars every week. After {m} weeks she spends {e} dollars on a bicycle lamp and "
            f"half of what is left on books. How much money does she have now?")


def _garden(r: random.Random) -> str:
    rows, per, lost = r.randint(4, 15), r.randint(6, 20), r.randint(5, 30)
    return (f"A garden has {rows} rows of tomato plants with {per} plants in each row. Frost kills {lost}% of the "
            "plants, rounded down to a whole plant. Each surviving plant gives 3 kilograms of tomatoes. How many "
            "kilograms are harvested?")


def _paint(r: random.Random) -> str:
    w, h, c = r.randint(3, 9), r.randint(2, 4), r.randint(8, 14)
    return (f"A room is {w} metres long, {w - 1} metres wide and {h} metres high. One litre of paint covers {c} "
            "square metres. How many litres are needed to paint the four walls twice, ignoring doors and windows? "
            "Paint is sold in whole litres.")


def _classroom(r: random.Random) -> str:
    n, g, f = r.randint(18, 36), r.randint(2, 5), r.randint(2, 5)
    return (f"A class of {n} students is split into groups of {g}; students left over join the last group. Each "
            f"group needs {f} folders and one extra folder for the teacher's copy. How many groups are there and "
            "how many folders are needed?")


def _tickets(r: random.Random) -> str:
    a, c, na, nc, disc = r.randint(8, 20), r.randint(3, 9), r.randint(2, 5), r.randint(1, 6), r.randint(5, 25)
    return (f"Museum tickets cost {a} dollars for adults and {c} dollars for children. A family of {na} adults and "
            f"{nc} children gets a {disc}% discount on the total. What do they pay?")


def _recipe(r: random.Random) -> str:
    serves, want, flour = r.randint(2, 6), r.randint(7, 20), r.randint(150, 500)
    return (f"A recipe that serves {serves} people uses {flour} grams of flour. How much flour is needed to serve "
            f"{want} people, and how many 1-kilogram bags must be bought?")


def _tank(r: random.Random) -> str:
    cap, fill, leak = r.randint(200, 900), r.randint(15, 40), r.randint(2, 10)
    return (f"A water tank holds {cap} litres. A pipe fills it at {fill} litres per minute while a leak loses "
            f"{leak} litres per minute. Starting empty, after how many whole minutes is the tank full?")


def _shop(r: random.Random) -> str:
    price, n, tax = r.randint(3, 30), r.randint(4, 15), r.randint(5, 20)
    return (f"A shop buys notebooks at {price} dollars each and sells them for 40% more. It sells {n} notebooks and "
            f"pays a {tax}% tax on its profit. What is its profit after tax?")


PROBLEMS: dict[str, Callable[[random.Random], str]] = {
    "bakery": _bakery, "train": _train, "savings": _savings, "garden": _garden, "paint": _paint,
    "classroom": _classroom, "tickets": _tickets, "recipe": _recipe, "tank": _tank, "shop": _shop,
}
INSTRUCTIONS = ("Show each step of the calculation, then give the final answer on its own line as 'Answer: ...'.",
                "Explain your reasoning briefly, check the result, and end with 'Answer: ...'.")


def _solve(problem: str, instruction: str) -> str:
    return f"Solve the following problem step by step. {instruction}\n\nProblem: {problem}"


def problems() -> list[tuple[str, str]]:
    """(id, problem text) for every template and variant, in a stable order."""
    return [(f"{name}/{v}", make(random.Random(f"math/{name}/{v}")))
            for name, make in PROBLEMS.items() for v in range(VARIANTS)]


def pools() -> dict[str, Pool]:
    return {"word_problem": product_pool("word_problem", problems(), INSTRUCTIONS, _solve, "math")}
