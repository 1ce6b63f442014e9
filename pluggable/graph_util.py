"""``pg.graph_util``: frozen graphs (see ``pluggable.graph.graph_util``)."""
from .graph.graph_util import (ImportedGraph, import_graph_def, set_import_limits,  # noqa: F401
                               write_graph_def)  # noqa: F401

__all__ = ["ImportedGraph", "import_graph_def", "set_import_limits", "write_graph_def"]
