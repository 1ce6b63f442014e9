"""What the graph-pass tests share: a function traced and run eagerly on one
device, and the ops of a graph."""
import pluggable as pg


def traced(fn, *arrays, device="CPU:0"):
    """(optimised graph, traced result, eager result) of fn on `device`."""
    f = pg.function(fn)
    with pg.device(device):
        args = [pg.constant(a) for a in arrays]
        out = f(*args)
        graph = f.get_concrete_function(*args).optimized_graph
        eager = fn(*args)
    return graph, out, eager


def graph_ops(graph):
    return sorted(n.op for n in graph.nodes)
