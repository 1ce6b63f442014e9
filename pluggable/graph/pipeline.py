"""What happens to a graph before it first runs.

``prepare(graph, input_devices)`` returns a new graph (the traced one is
never changed), in this order:

1. placement (``placer``: the eager rules, soft placement, the placement log);
2. pruning of nodes no output needs;
3. constant folding;
4. common-subexpression elimination;
5. transposes moved below the element-wise ops that read them and dropped
   where two undo each other (``passes.sink_transposes``: the per-node
   layout changes of an imported NCHW model meet between its NHWC kernels);
6. fusion of composite attention and layer norm into the fused ops
   (``fusion``), and pruning again;
7. each device's plugin graph optimizers on the partition placed on that
   device (``partition``: the answer is validated, a bad one is recorded on
   the optimizer and ignored);
8. copy insertion between devices (``copies``).

The framework's passes honour the ``TP_OptimizerConfigs`` wishes of the
plugin optimizers of a node's device (``pass_allowed``).
"""
from __future__ import annotations

import logging

from ..plugins import graph_optimizers
from . import copies, fusion, partition, passes, placer
from .ir import Graph, Node

log = logging.getLogger("pluggable.graph")


def pass_allowed(node: Node, field: str) -> bool:
    """Whether the framework pass `field` (a ``TP_OptimizerConfigs`` field
    name) may change `node`: not when a plugin optimizer of the node's device
    type set it OFF (for ``disable_model_pruning``: ON)."""
    dev = node.assigned
    if dev is None or dev.device_type == "CPU":
        return True
    wishes = {opt.config(field) for opt in graph_optimizers.optimizers_for(dev.device_type)}
    if field == "disable_model_pruning":
        return "ON" not in wishes
    return "OFF" not in wishes


def prepare(source: Graph, input_devices: list, default_device: str = "") -> Graph:
    """The placed, optimised copy of `source` that the executor runs
    (`default_device`: see ``placer.place``)."""
    g = source.copy()
    placer.place(g, input_devices, default_device)
    counts = {"pruned": passes.prune(g, pass_allowed)}
    counts["folded"] = passes.fold_constants(g, pass_allowed)
    counts["merged"] = passes.eliminate_common_subexpressions(g, pass_allowed)
    counts["transposes"] = passes.sink_transposes(g, pass_allowed)
    counts["fused"] = fusion.fuse(g, pass_allowed)
    counts["pruned"] += passes.prune(g, pass_allowed)
    counts["plugin"] = partition.run_plugin_optimizers(g)
    counts["copies"] = copies.insert_copies(g)
    log.debug("graph %s prepared: %s", source.name, counts)
    g.pass_counts = counts
    return g
