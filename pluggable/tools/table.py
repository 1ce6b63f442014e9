"""Text tables and lines that fit the command line's width.

``format_table`` lays rows out in columns; given a ``width``, the columns
named in ``fit`` give way so that every line fits: ``"wrap"`` folds a cell
onto more lines of its column, ``"cut"`` shortens it to its start and
``"cut-start"`` to its end (for paths: the file name stays), and
``"below"`` moves the column onto lines of its own under each row.  Without
a width (``--wide``) every cell is printed whole, one line per row.
"""
from __future__ import annotations

import re
from typing import Sequence

WIDTH = 100          # what the command line's output fits, unless --wide
ELLIPSIS = "..."
_BELOW_INDENT = "    "
# Where a line may break: after a space, or after / , ; : = | + when a word
# is longer than the line.
_BREAK = re.compile(r"(?<=\s)|(?<=[/,;:=|+])")


def fold(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters, broken at spaces,
    else after a separator (``/``, ``,`` ...), else anywhere."""
    if width <= 0 or len(text) <= width:
        return [text]
    pieces: list[str] = []
    for piece in _BREAK.split(text):
        while len(piece) > width:
            pieces.append(piece[:width])
            piece = piece[width:]
        if piece:
            pieces.append(piece)
    lines, line = [], ""
    for piece in pieces:
        if len(line) + len(piece.rstrip()) <= width:
            line += piece
        else:
            lines.append(line.rstrip())
            line = piece
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def shorten(text: str, width: int, *, keep_end: bool = False) -> str:
    """`text`, or as much of its start (its end with `keep_end`) as fits in
    `width` characters with ``...`` marking what was left out."""
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[-width:] if keep_end else text[:width]
    room = width - len(ELLIPSIS)
    return ELLIPSIS + text[-room:] if keep_end else text[:room] + ELLIPSIS


def fit_lines(text: str, width: int | None = WIDTH) -> str:
    """Each line of `text` longer than `width` folded, its continuation
    lines indented four columns past the line's own indentation."""
    if width is None:
        return text
    out = []
    for line in text.splitlines():
        more = line[:len(line) - len(line.lstrip())] + _BELOW_INDENT
        first = fold(line, width)[0]
        out.append(first)
        rest = line[len(first):].strip()
        if rest:
            out.extend(more + part for part in fold(rest, width - len(more)))
    return "\n".join(out)


def _widths(natural: list[int], header: Sequence[str], fit: dict[int, str],
            width: int) -> list[int]:
    """Column widths: natural for the fixed ones; what is left shared out
    among the `fit` columns, the narrowest served first."""
    inline = [i for i in range(len(natural)) if fit.get(i) != "below"]
    flex = sorted((i for i in inline if i in fit), key=lambda i: natural[i])
    widths = list(natural)
    left = width - sum(natural[i] for i in inline if i not in fit) - 2 * (len(inline) - 1)
    for k, i in enumerate(flex):
        share = left // (len(flex) - k)
        widths[i] = min(natural[i], max(share, len(header[i]), 8))
        left -= widths[i]
    return widths


def _layout(header: Sequence[str], rows: Sequence[Sequence[object]], width: int | None,
            fit: dict[int, str] | None) -> tuple[list[list[str]], list[int], dict[int, str]]:
    """The cells as text, the column widths, and the `fit` modes in force
    (none when the table fits as it is)."""
    table = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    natural = [max(len(r[i]) for r in table) for i in range(len(header))]
    if not fit or width is None or sum(natural) + 2 * (len(natural) - 1) <= width:
        return table, natural, {}
    return table, _widths(natural, header, fit, width), fit


def cuts_cells(header: Sequence[str], rows: Sequence[Sequence[object]], *,
               width: int | None, fit: dict[int, str] | None) -> bool:
    """Whether ``format_table`` with these arguments shortens a cell."""
    table, widths, fit = _layout(header, rows, width, fit)
    return any(mode.startswith("cut") and len(r[i]) > widths[i]
               for i, mode in fit.items() for r in table)


def _cell_lines(text: str, mode: str | None, w: int) -> list[str]:
    if mode == "wrap":
        return fold(text, w)
    if mode in ("cut", "cut-start"):
        return [shorten(text, w, keep_end=mode == "cut-start")]
    return [text]


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]], *,
                 width: int | None = None, fit: dict[int, str] | None = None,
                 align: str = "") -> str:
    """The table: a header line, a rule, one line per row, columns two
    spaces apart and left-aligned (``align``: one letter per column, ``r``
    right-aligns it).  With `width`, a table wider than that makes the
    columns of `fit` (index -> ``"wrap"``, ``"cut"``, ``"cut-start"`` or
    ``"below"``) give way; fixed columns never shrink."""
    table, widths, fit = _layout(header, rows, width, fit)
    below = [i for i in range(len(header)) if fit.get(i) == "below"]

    def render(cells: list[str]) -> list[str]:
        cols = [(i, _cell_lines(c, fit.get(i), widths[i])) for i, c in enumerate(cells)
                if i not in below]
        lines = []
        for j in range(max(len(c) for _, c in cols)):
            parts = []
            for i, c in cols:
                text = c[j] if j < len(c) else ""
                right = i < len(align) and align[i] == "r"
                parts.append(text.rjust(widths[i]) if right else text.ljust(widths[i]))
            lines.append("  ".join(parts).rstrip())
        for i in below:
            room = (width or 0) - len(_BELOW_INDENT)
            lines += [_BELOW_INDENT + part for part in fold(cells[i], room) if cells[i]]
        return lines

    inline = [w for i, w in enumerate(widths) if i not in below]
    out = render(table[0]) + ["-" * (sum(inline) + 2 * (len(inline) - 1))]
    for r in table[1:]:
        out += render(r)
    return "\n".join(out)
