"""The draft-budget job's `[job]` table (jobs/draft_budget_twin.py, loadgen/campaigns/budget.py; docs/twin.md): its keys
declared once, so the campaign reads them and docs/experiments.md documents them from here."""

from __future__ import annotations

from loadgen.keys import REQUIRED, Bounds, Choice, Key, Keys

BUDGET_JOB = Keys("job", "The draft-budget job only (`python -m jobs.draft_budget_twin`, docs/twin.md): which target's "
                  "draft budget moves its crossover with which baseline.", (
    Key("baseline", str, REQUIRED, "the target the drafted one is compared with (a target's name)"),
    Key("drafted", str, REQUIRED, "the target whose draft budget changes (a target's name)"),
    Key("budgets", list, REQUIRED, "the budgets predicted from the twin and confirmed, whole numbers >= 2"),
    Key("own_budget", int, None, "the drafted target's budget as launched; unset: its "
        "`--speculative-num-draft-tokens`", Bounds(2), shown="its flags"),
    Key("budget_urls", dict, {}, "budget -> the URL of a running server with that budget (real servers: each "
        "budget needs its own)"),
    Key("search_min", int, 1, "the crossover is looked for in C = search_min..search_max", Bounds(1)),
    Key("search_max", int, 32, "the top of the crossover's range (above search_min)", Bounds(2)),
    Key("verdict", str, "paired", "a level's call: \"paired\" (the lead read prompt by prompt, at a stated error "
        "rate) or \"medians\" (each one's median tok/s, a 3% difference called from one step)",
        Choice(("paired", "medians"), "verdict")),
    Key("false_verdict", float, 0.05, "verdict = \"paired\": a clear call is the wrong way at most this often "
        "where the two are 3% apart", Bounds(0, 0.5, above=True, below=True, what="a share")),
    Key("max_runs", int, 1, "runs of a level whose call stays unclear (within the tie band, or too few pairs)",
        Bounds(1)),
))
