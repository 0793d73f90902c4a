"""The demo's agent conversation, written out by this module (deterministic: a fixed seed).

An agent fixes a rounding bug in a small invoicing library ("tally"): it lists the files, reads
the modules and the tests, runs the failing test, edits, runs the suite, finds a second caller of
the changed function, fixes it too and reports. Its tool results are large enough to be
offloaded (file listings, whole modules, pytest -v runs) and its history grows past the default
`max_total_tokens`, so a replay shows both compaction and compression.

    python -m proxy.demo.conversation > proxy/demo/conversation.jsonl   # regenerate the shipped copy
"""

from __future__ import annotations

import json
import random
from typing import Any

SEED = 24
ID = "demo-fix-invoice-rounding"
MODULES = (
    "money",
    "invoice",
    "discounts",
    "taxes",
    "reports",
    "customers",
    "currency",
    "ledger",
    "export",
    "schedules",
    "reminders",
    "templates",
)
NOUNS = (
    "amount",
    "line",
    "total",
    "rate",
    "discount",
    "tax",
    "fee",
    "credit",
    "balance",
    "item",
    "price",
    "quantity",
    "period",
    "customer",
    "currency",
    "payment",
    "invoice",
    "note",
    "batch",
    "entry",
)
VERBS = (
    "compute",
    "apply",
    "split",
    "merge",
    "format",
    "parse",
    "validate",
    "normalise",
    "sum",
    "allocate",
    "convert",
    "render",
    "collect",
    "resolve",
    "check",
    "build",
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command in the repository.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace one exact snippet of a file with another.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["path", "old", "new"],
            },
        },
    },
]

SYSTEM = (
    "You are a careful software engineer working in a git repository through tools: `run` (a shell "
    "command), `read_file` and `edit_file`. Find the cause before changing code, keep changes minimal, "
    "run the tests after every change and finish with a short report of what you changed and why."
)

ISSUE = """Invoice totals are off by one cent when a percentage discount applies.

Customer ACME-4471 was billed 107.47 for invoice INV-2024-0193 instead of 107.48: three lines of
35.825 after a 12.5 % discount. Our accounting rule is half-up rounding to the cent on every line
(see docs/rounding.md). Please fix it, with a regression test, without changing the totals of
invoices that have no discount."""


def _function(rng: random.Random, module: str) -> tuple[str, str]:
    """A plausible function of `module`: its name and source."""
    verb, noun, other = rng.choice(VERBS), rng.choice(NOUNS), rng.choice(NOUNS)
    name = f"{verb}_{noun}_{other}" if rng.random() < 0.5 else f"{verb}_{noun}"
    args = ", ".join(rng.sample(NOUNS, rng.randint(1, 3)))
    body = [
        f"def {name}({args}, *, strict: bool = False) -> Decimal:",
        f'    """{verb.capitalize()} the {noun} of {module} {other}s (see docs/{module}.md)."""',
    ]
    for k in range(rng.randint(4, 12)):
        var = rng.choice(NOUNS)
        body.append(
            rng.choice(
                [
                    f"    {var} = Decimal(str({var})) if not isinstance({var}, Decimal) else {var}",
                    f'    if strict and {var} < 0:\n        raise ValueError(f"negative {var}: {{{var}}}")',
                    f'    {var}_{k} = {var} * Decimal("{rng.randint(1, 99)}.{rng.randint(0, 99):02d}")',
                    f'    log.debug("{module}.{name}: %s=%s", "{var}", {var})',
                    f"    for {var}_part in _{module}_parts({var}):\n        {var} += {var}_part.{rng.choice(NOUNS)}",
                ]
            )
        )
    body.append(f"    return round_cents({rng.choice(NOUNS)})")
    return name, "\n".join(body)


def module_source(rng: random.Random, module: str, extra: str = "", *, functions: int = 14) -> str:
    head = [
        f'"""tally.{module}: {module} handling for invoices."""',
        "",
        "from __future__ import annotations",
        "",
        "import logging",
        "from decimal import Decimal",
        "",
        "from tally.money import CENT, round_cents",
        "",
        "log = logging.getLogger(__name__)",
        "",
    ]
    parts = [_function(rng, module)[1] for _ in range(functions)]
    return "\n".join(head) + "\n\n" + (extra + "\n\n\n" if extra else "") + "\n\n\n".join(parts) + "\n"


MONEY_BUG = '''CENT = Decimal("0.01")
ROUNDING = ROUND_HALF_EVEN  # banker's rounding


def round_cents(amount: Decimal) -> Decimal:
    """`amount` rounded to the cent."""
    return amount.quantize(CENT, rounding=ROUNDING)


def line_total(price: Decimal, quantity: int, discount_percent: Decimal = Decimal(0)) -> Decimal:
    """One invoice line: price × quantity, less the discount, rounded to the cent."""
    gross = price * quantity
    return round_cents(gross - gross * discount_percent / 100)'''

REPORTS_CALLER = '''def monthly_revenue(invoices: list[Invoice]) -> Decimal:
    """Revenue of a month: every line total, rounded once at the end (legacy behaviour)."""
    total = sum((line.price * line.quantity * (1 - line.discount_percent / 100)
                 for invoice in invoices for line in invoice.lines), Decimal(0))
    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)'''


def test_source(rng: random.Random, module: str, tests: int = 16) -> str:
    """A test module of `module`: `tests` short tests."""
    out = [
        f'"""Tests of tally.{module}."""',
        "",
        "from decimal import Decimal",
        "",
        f"from tally.{module} import *  # noqa: F403",
        "from tally.invoice import Invoice, Line",
        "",
    ]
    for k in range(tests):
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        price = f"{rng.randint(1, 500)}.{rng.randint(0, 99):02d}"
        out += [
            "",
            f"def test_{verb}_{noun}_{k}():",
            f'    line = Line(price=Decimal("{price}"), quantity={rng.randint(1, 9)}, '
            f'discount_percent=Decimal("{rng.choice(["0", "5", "10", "12.5", "20"])}"))',
            f'    invoice = Invoice(customer="C-{rng.randint(1000, 9999)}", lines=[line])',
            f'    assert invoice.total() == Decimal("{rng.randint(1, 4000)}.{rng.randint(0, 99):02d}")',
        ]
    return "\n".join(out) + "\n"


def prose(rng: random.Random, title: str, paragraphs: int) -> str:
    """A markdown document of `paragraphs` short paragraphs."""
    out = [f"# {title}", ""]
    for k in range(paragraphs):
        words = [rng.choice(NOUNS + VERBS) for _ in range(rng.randint(25, 45))]
        out += [
            f"## {k + 1}. {rng.choice(VERBS).capitalize()} {rng.choice(NOUNS)}s",
            "",
            " ".join(words).capitalize() + ".",
            "",
        ]
    return "\n".join(out)


def file_listing(rng: random.Random) -> str:
    files = [
        "README.md",
        "pyproject.toml",
        "docs/rounding.md",
        "docs/index.md",
        "CHANGELOG.md",
        "src/tally/__init__.py",
    ]
    files += [f"src/tally/{m}.py" for m in MODULES]
    files += [f"tests/test_{m}.py" for m in MODULES]
    for m in MODULES:
        files += [f"tests/fixtures/{m}/{rng.choice(NOUNS)}_{k:03d}.json" for k in range(rng.randint(12, 30))]
        files += [f"docs/{m}.md", f"docs/api/{m}.rst"]
    return "\n".join(sorted(set(files)))


def test_run(rng: random.Random, modules: tuple[str, ...], failing: dict[str, str]) -> str:
    """A `pytest -v` run over the tests of `modules`; `failing`: test id → failure text. The whole
    suite (every module) has more tests per module than a module's own file shows: its
    integration tests too, so a whole-suite run is above the default tool-result threshold."""
    per_module = 44 if modules == MODULES else 22
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0 -- /repo/.venv/bin/python",
        "rootdir: /repo",
        "configfile: pyproject.toml",
        f"collected {len(modules) * per_module} items",
        "",
    ]
    count = 0
    for m in modules:
        for k in range(per_module):
            verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
            test = f"tests/test_{m}.py::test_{verb}_{noun}_{k}"
            if k == 7 and m in failing:
                test = failing[m].split("\n", 1)[0]
            count += 1
            status = "FAILED" if test in {f.split(chr(10), 1)[0] for f in failing.values()} else "PASSED"
            lines.append(f"{test} {status} [{100 * count // (len(modules) * per_module):3d}%]")
    if failing:
        lines += ["", "=================================== FAILURES ==================================="]
        for text in failing.values():
            lines += text.split("\n")[1:]
    passed = count - len(failing)
    lines.append(
        f"{'=' * 20} {len(failing)} failed, {passed} passed in {rng.uniform(2, 9):.2f}s {'=' * 20}"
        if failing
        else f"{'=' * 28} {passed} passed in {rng.uniform(2, 9):.2f}s {'=' * 28}"
    )
    return "\n".join(lines)


INVOICE_FAILURE = """tests/test_invoice.py::test_discounted_lines_round_half_up
_____________________ test_discounted_lines_round_half_up ______________________

    def test_discounted_lines_round_half_up():
        invoice = Invoice(customer="ACME-4471", lines=[Line(price=Decimal("40.94"), quantity=1,
                                                            discount_percent=Decimal("12.5"))] * 3)
>       assert invoice.total() == Decimal("107.48")
E       AssertionError: assert Decimal('107.46') == Decimal('107.48')
E        +  where Decimal('107.46') = <bound method Invoice.total of Invoice(number='INV-2024-0193')>()

tests/test_invoice.py:212: AssertionError"""

REPORTS_FAILURE = """tests/test_reports.py::test_monthly_revenue_matches_invoice_totals
________________ test_monthly_revenue_matches_invoice_totals _________________

    def test_monthly_revenue_matches_invoice_totals():
        invoices = load_fixture("reports/march_2024.json")
>       assert monthly_revenue(invoices) == sum(i.total() for i in invoices)
E       AssertionError: assert Decimal('18214.37') == Decimal('18214.41')

tests/test_reports.py:98: AssertionError"""


def conversation() -> dict[str, Any]:
    rng = random.Random(SEED)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ISSUE}]
    sources = {m: module_source(rng, m) for m in MODULES}
    sources["money"] = module_source(rng, "money", MONEY_BUG, functions=8).replace(
        "from tally.money import CENT, round_cents", "from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP"
    )
    sources["reports"] = module_source(rng, "reports", REPORTS_CALLER, functions=16)
    n = [0]

    def step(thought: str, tool: str, result: str, **arguments: str) -> None:
        n[0] += 1
        call_id = f"call_{n[0]:03d}"
        messages.append(
            {
                "role": "assistant",
                "content": thought,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})

    step("I'll start with the layout of the repository.", "run", file_listing(rng), command="git ls-files")
    step(
        "The rounding rule is documented; let me read it first.",
        "read_file",
        "# Rounding\n\nEvery invoice line is rounded to the cent, half up (ROUND_HALF_UP), before the lines "
        "are added.\nTotals are never rounded again.\n"
        + "\nHistory: "
        + " ".join(f"v1.{k}: {rng.choice(VERBS)} {rng.choice(NOUNS)}." for k in range(40)),
        path="docs/rounding.md",
    )
    step(
        "Now the money helpers, where rounding most likely lives.",
        "read_file",
        sources["money"],
        path="src/tally/money.py",
    )
    step(
        "And their tests, to see which rounding they expect.",
        "read_file",
        test_source(rng, "money"),
        path="tests/test_money.py",
    )
    step(
        "When did ROUND_HALF_EVEN come in?",
        "run",
        "\n".join(
            f"{rng.getrandbits(28):07x} {rng.choice(VERBS)} {rng.choice(NOUNS)} in tally.{rng.choice(MODULES)}"
            for _ in range(40)
        ),
        command="git log --oneline -40 -- src/tally/money.py",
    )
    step(
        "`round_cents` uses ROUNDING = ROUND_HALF_EVEN, not half up as docs/rounding.md says. Let me see how "
        "invoice.py uses `line_total` before changing anything.",
        "read_file",
        sources["invoice"],
        path="src/tally/invoice.py",
    )
    step(
        "Let me reproduce with the failing case from the issue: is there already a test?",
        "run",
        test_run(rng, ("invoice",), {"invoice": INVOICE_FAILURE}),
        command="pytest -v tests/test_invoice.py",
    )
    step(
        "The failing test is in tests/test_invoice.py; reading the file around it.",
        "read_file",
        test_source(rng, "invoice"),
        path="tests/test_invoice.py",
    )
    step(
        "The invoice documentation, for what a discount should do to each line.",
        "read_file",
        prose(rng, "Invoices", 14),
        path="docs/invoice.md",
    )
    step(
        "test_discounted_lines_round_half_up fails: 107.46 instead of 107.48. The discount module may round "
        "too; reading it.",
        "read_file",
        sources["discounts"],
        path="src/tally/discounts.py",
    )
    step(
        "discounts.py calls round_cents only through line_total. Where else is ROUND_HALF_EVEN used?",
        "run",
        "\n".join(
            f"src/tally/{m}.py:{rng.randint(10, 400)}:    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)"
            for m in ("money", "reports")
        )
        + "\n"
        + "\n".join(
            f'tests/fixtures/{m}/rounding_{k:03d}.json:  "mode": "ROUND_HALF_EVEN"' for m in MODULES for k in range(6)
        ),
        command="grep -rn ROUND_HALF_EVEN src tests",
    )
    step(
        "Two callers: tally.money.round_cents and tally.reports.monthly_revenue. The taxes module could "
        "depend on the current behaviour; checking.",
        "read_file",
        sources["taxes"],
        path="src/tally/taxes.py",
    )
    step(
        "Currency conversion rounds too; checking it does not call quantize itself.",
        "read_file",
        module_source(rng, "currency", functions=6),
        path="src/tally/currency.py",
    )
    step(
        "Running the discount tests before the change, as a baseline.",
        "run",
        test_run(rng, ("discounts",), {}),
        command="pytest -v tests/test_discounts.py",
    )
    step(
        "taxes.py only goes through round_cents. Fixing ROUNDING in src/tally/money.py.",
        "edit_file",
        "Edited src/tally/money.py: 1 replacement.",
        path="src/tally/money.py",
        old="ROUNDING = ROUND_HALF_EVEN  # banker's rounding",
        new="ROUNDING = ROUND_HALF_UP  # docs/rounding.md",
    )
    step(
        "Re-running the invoice tests.",
        "run",
        test_run(rng, ("invoice",), {}),
        command="pytest -v tests/test_invoice.py",
    )
    step(
        "The invoice tests pass. Now the whole suite, since round_cents is used everywhere.",
        "run",
        test_run(rng, MODULES, {"reports": REPORTS_FAILURE}),
        command="pytest -v",
    )
    step(
        "test_monthly_revenue_matches_invoice_totals fails: monthly_revenue rounds once at the end, with "
        "ROUND_HALF_EVEN. Reading src/tally/reports.py.",
        "read_file",
        sources["reports"],
        path="src/tally/reports.py",
    )
    step(
        "Its tests, to see what monthly_revenue is expected to return.",
        "read_file",
        test_source(rng, "reports"),
        path="tests/test_reports.py",
    )
    step(
        "monthly_revenue should add the rounded line totals, as Invoice.total does. Checking the customers "
        "module for the same pattern before editing.",
        "read_file",
        sources["customers"],
        path="src/tally/customers.py",
    )
    step(
        "customers.py is fine. Editing monthly_revenue to sum invoice totals.",
        "edit_file",
        "Edited src/tally/reports.py: 1 replacement.",
        path="src/tally/reports.py",
        old=REPORTS_CALLER.split("\n", 2)[2],
        new="    return sum((invoice.total() for invoice in invoices), Decimal(0))",
    )
    step(
        "Running the reports tests.", "run", test_run(rng, ("reports",), {}), command="pytest -v tests/test_reports.py"
    )
    step(
        "Adding the regression test from the issue (ACME-4471, INV-2024-0193) to tests/test_invoice.py.",
        "edit_file",
        "Edited tests/test_invoice.py: 1 insertion.",
        path="tests/test_invoice.py",
        old="# regression tests",
        new="# regression tests\n\ndef test_inv_2024_0193_totals_107_48(): ...",
    )
    step(
        "The ledger exports totals too; making sure it does not round on its own.",
        "read_file",
        sources["ledger"],
        path="src/tally/ledger.py",
    )
    step(
        "ledger.py reads Invoice.total only. Whole suite again.", "run", test_run(rng, MODULES, {}), command="pytest -v"
    )
    step(
        "All green. The export module formats amounts; checking it keeps two decimals.",
        "read_file",
        sources["export"],
        path="src/tally/export.py",
    )
    step(
        "Fine. Invoices without a discount must keep their totals: comparing the fixtures before and after.",
        "run",
        "\n".join(
            f"tests/fixtures/invoice/{rng.choice(NOUNS)}_{k:03d}.json: total unchanged "
            f"({rng.randint(10, 9999)}.{rng.randint(0, 99):02d})"
            for k in range(120)
        )
        + "\n120 invoices without discount: 0 changed; 14 with a discount: 9 changed by one cent",
        command="python scripts/compare_totals.py --before main --after HEAD",
    )
    step(
        "Schedules create invoices from templates; do they sum lines themselves?",
        "read_file",
        module_source(rng, "schedules", functions=6),
        path="src/tally/schedules.py",
    )
    step(
        "They call Invoice.total. The taxes and currency tests once more.",
        "run",
        test_run(rng, ("taxes", "currency"), {}),
        command="pytest -v tests/test_taxes.py tests/test_currency.py",
    )
    step(
        "Reminders quote invoice totals in their texts; checking how.",
        "read_file",
        module_source(rng, "reminders", functions=6),
        path="src/tally/reminders.py",
    )
    step(
        "They format Invoice.total. The API docs describe rounding too; reading them.",
        "read_file",
        prose(rng, "tally.invoice API", 14),
        path="docs/api/invoice.rst",
    )
    step(
        "The docs say half up; they need no change. The discount tests, to add one for 12.5 %.",
        "read_file",
        test_source(rng, "discounts"),
        path="tests/test_discounts.py",
    )
    step(
        "There is one for 10 % only; the regression test covers 12.5 %. Export and ledger tests now.",
        "run",
        test_run(rng, ("export", "ledger"), {}),
        command="pytest -v tests/test_export.py tests/test_ledger.py",
    )
    step(
        "The ledger tests, to see whether any fixture expects banker's rounding.",
        "read_file",
        test_source(rng, "ledger"),
        path="tests/test_ledger.py",
    )
    step("The changelog, to add an entry.", "read_file", prose(rng, "Changelog", 12), path="CHANGELOG.md")
    step(
        "Adding the entry.",
        "edit_file",
        "Edited CHANGELOG.md: 1 insertion.",
        path="CHANGELOG.md",
        old="# Changelog\n",
        new="# Changelog\n\n## Unreleased\n\n- Invoice lines round half up again (#193).\n",
    )
    step(
        "Linting and type checks.",
        "run",
        "ruff: All checks passed!\nmypy: Success: no issues found in 14 source files",
        command="ruff check src tests && mypy src",
    )
    step(
        "The diff, to review.",
        "run",
        "\n".join(
            [
                "diff --git a/src/tally/money.py b/src/tally/money.py",
                "-ROUNDING = ROUND_HALF_EVEN  # banker's rounding",
                "+ROUNDING = ROUND_HALF_UP  # docs/rounding.md",
                "diff --git a/src/tally/reports.py b/src/tally/reports.py",
                *("-" + line for line in REPORTS_CALLER.split("\n")[2:]),
                "+    return sum((invoice.total() for invoice in invoices), Decimal(0))",
                "diff --git a/tests/test_invoice.py b/tests/test_invoice.py",
                "+def test_inv_2024_0193_totals_107_48(): ...",
            ]
        ),
        command="git diff",
    )
    messages.append(
        {
            "role": "assistant",
            "content": (
                "Fixed. tally.money.round_cents rounded with ROUND_HALF_EVEN (banker's rounding) while docs/rounding.md "
                "requires ROUND_HALF_UP per line: ROUNDING is now ROUND_HALF_UP. tally.reports.monthly_revenue rounded "
                "the month's sum once with ROUND_HALF_EVEN; it now adds the invoices' totals, so test_monthly_revenue_"
                "matches_invoice_totals passes. Added test_inv_2024_0193_totals_107_48. Invoices without a discount keep "
                "their totals (120 of 120 unchanged); 9 of 14 discounted ones change by one cent."
            ),
        }
    )
    return {"id": ID, "messages": messages, "tools": TOOLS}


if __name__ == "__main__":
    print(json.dumps(conversation(), ensure_ascii=False))
