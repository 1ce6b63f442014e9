"""Results of the conformance checks and the report table."""
from __future__ import annotations

import dataclasses

from ..table import format_table


@dataclasses.dataclass
class CheckResult:
    """One row of the conformance report. `outcome` is "pass", "fail" or "skip"."""
    name: str
    outcome: str
    detail: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class CheckFailed(Exception):
    """A conformance check failed; the message is the reason."""


class CheckSkipped(Exception):
    """A check does not apply to this plugin; the message says why."""


def expect(cond: bool, reason: str) -> None:
    if not cond:
        raise CheckFailed(reason)


def format_report(path: str, results: list[CheckResult], width: int | None = None) -> str:
    """The report: a table of the checks (its DETAIL column folded to fit
    `width`; whole lines without one) and the counts."""
    rows = [(r.name, r.outcome.upper(), f"{r.seconds:.2f}", r.detail) for r in results]
    failed = sum(r.outcome == "fail" for r in results)
    verdict = "FAILED" if failed else "PASSED"
    table = format_table(("CHECK", "RESULT", "SECONDS", "DETAIL"), rows, width=width,
                         fit={3: "wrap"})
    return (f"conformance of {path}\n\n{table}\n\n{verdict}: "
            f"{sum(r.outcome == 'pass' for r in results)} passed, {failed} failed, "
            f"{sum(r.outcome == 'skip' for r in results)} skipped")
