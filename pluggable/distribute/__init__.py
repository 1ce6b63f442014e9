"""Layer 6: collectives over tensors on several devices of one process,
built on TensorFlow's collective ops (``CollectiveReduceV2``,
``CollectiveReduceScatterV2``, ``CollectiveGatherV2``,
``CollectiveBcastSendV2`` / ``RecvV2``). ``pg.distribute.all_reduce``,
``all_gather``, ``broadcast``, ``reduce_scatter``; and the same across
processes (one tensor each) after ``init_process_group``, plus
``all_to_all``, the TCP store, the launcher (``python -m
pluggable.distribute.run``) and ``all_reduce_gradients`` for data-parallel
training (``GradientReducer``: the same, overlapped with the backward
pass); ``MirroredStrategy`` (replicas on the devices of this process,
TensorFlow's); see docs/distribute.md."""
from .backend import Backend, register_backend
from .collectives import REDUCTIONS, all_gather, all_reduce, broadcast, reduce_scatter
from .data_parallel import all_reduce_gradients, broadcast_variables
from .group import (ProcessGroup, all_reduce_async, all_to_all, barrier, destroy_process_group,
                    get_rank, get_world_size, init_process_group, is_initialized)
from .mirrored import (DistributedValues, Mirrored, MirroredStrategy, MirroredVariable,
                       PerReplica, ReduceOp, ReplicaContext, get_replica_context, get_strategy,
                       has_strategy, in_cross_replica_context)
from .overlap import GradientReducer
from .store import TCPStore

__all__ = ["Backend", "GradientReducer", "ProcessGroup", "REDUCTIONS", "TCPStore", "all_gather",
           "all_reduce", "all_reduce_async", "all_reduce_gradients", "all_to_all", "barrier",
           "broadcast", "broadcast_variables", "destroy_process_group", "get_rank",
           "get_world_size", "init_process_group", "is_initialized", "reduce_scatter",
           "register_backend",
           "DistributedValues", "Mirrored", "MirroredStrategy", "MirroredVariable", "PerReplica",
           "ReduceOp", "ReplicaContext", "get_replica_context", "get_strategy", "has_strategy",
           "in_cross_replica_context"]
