"""Nested structures of values: tuples, lists, dicts (sorted by key) and
namedtuples, flattened to a list of leaves and packed back."""
from __future__ import annotations

from typing import Any, Callable


def is_nested(x: Any) -> bool:
    return isinstance(x, (tuple, list, dict))


def flatten(x: Any) -> list:
    """The leaves of `x`, depth first (dict values in sorted key order)."""
    out: list = []
    _flatten(x, out)
    return out


def _flatten(x: Any, out: list) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            _flatten(x[k], out)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _flatten(v, out)
    else:
        out.append(x)


def flatten_with_paths(x: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, leaf) pairs; paths read like "[0]['loss']"."""
    if isinstance(x, dict):
        return [p for k in sorted(x) for p in flatten_with_paths(x[k], f"{path}[{k!r}]")]
    if isinstance(x, (tuple, list)):
        return [p for i, v in enumerate(x) for p in flatten_with_paths(v, f"{path}[{i}]")]
    return [(path, x)]


def pack_as(structure: Any, leaves: list) -> Any:
    """`structure` with its leaves replaced by `leaves`, in order."""
    if not isinstance(structure, (dict, tuple, list)) and len(leaves) == 1:
        return leaves[0]  # a lone leaf (a function returning one tensor)
    it = iter(leaves)
    out = _pack(structure, it)
    rest = list(it)
    if rest:
        raise ValueError(f"{len(rest)} leaves left over packing a structure")
    return out


def _pack(x: Any, it) -> Any:
    if isinstance(x, dict):
        vals = {k: _pack(x[k], it) for k in sorted(x)}
        return type(x)((k, vals[k]) for k in x) if type(x) is not dict else {k: vals[k] for k in x}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[_pack(v, it) for v in x])
    if isinstance(x, (tuple, list)):
        return type(x)(_pack(v, it) for v in x)
    return next(it)


def map_structure(fn: Callable[[Any], Any], x: Any) -> Any:
    return pack_as(x, [fn(v) for v in flatten(x)])


def same_structure(a: Any, b: Any) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and sorted(a) == sorted(b)
                and all(same_structure(a[k], b[k]) for k in a))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))
                and len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b)))
    return True
