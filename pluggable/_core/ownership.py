"""Copy and pickle rules for the Python objects that own a core resource.

An object that releases a core handle when it is collected (a stream, an
event, a device buffer, a captured device graph...) must never be
duplicated: ``copy.copy`` of such an object would give two owners of one
handle and the second release a use after free. Those classes derive from
``OwnsCoreResource``, which refuses copies and pickles with a TypeError.
Objects of which there is one per process (a device) derive from
``OnePerProcess``: a copy is the object itself.
"""
from __future__ import annotations


class OwnsCoreResource:
    """Refuses ``copy.copy``, ``copy.deepcopy`` and pickling."""

    __slots__ = ()

    def _refuse(self, what: str):
        raise TypeError(f"{what} of a {type(self).__name__}: it owns a resource of this "
                        "process's core, which only this object releases; pass the object "
                        "itself instead")

    def __copy__(self):
        self._refuse("copy.copy")

    def __deepcopy__(self, memo):
        self._refuse("copy.deepcopy")

    def __reduce_ex__(self, protocol):
        self._refuse("pickling")


class OnePerProcess:
    """``copy.copy`` and ``copy.deepcopy`` return the object itself."""

    __slots__ = ()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self
