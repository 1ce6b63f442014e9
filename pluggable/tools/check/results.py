"""Results of the conformance checks and the report table."""
from __future__ import annotations

import dataclasses


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


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
    lines = [fmt(header), "-" * len(fmt(header))]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def format_report(path: str, results: list[CheckResult]) -> str:
    rows = [(r.name, r.outcome.upper(), f"{r.seconds:.2f}", r.detail) for r in results]
    failed = sum(r.outcome == "fail" for r in results)
    verdict = "FAILED" if failed else "PASSED"
    return (f"conformance of {path}\n\n" + format_table(("CHECK", "RESULT", "SECONDS", "DETAIL"), rows)
            + f"\n\n{verdict}: {sum(r.outcome == 'pass' for r in results)} passed, {failed} "
            f"failed, {sum(r.outcome == 'skip' for r in results)} skipped")
