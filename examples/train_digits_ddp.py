"""Data-parallel training of the digits CNN (examples/train_digits.py) on
several processes, one replica each:

    python -m pluggable.distribute.run --nproc 2 examples/train_digits_ddp.py --epochs 3

Every process builds the same model (rank 0's weights are broadcast at the
start), takes the same global batch each step and computes the gradients
of its shard (rank r: examples r, r+N, ...), scaled by the shard's share of
the global batch. ``pg.distribute.all_reduce_gradients`` sums them across
the processes in buckets, and every replica applies the same Adam step, so
they stay identical: the step equals one step on the whole batch in one
process. With ``--overlap`` a ``pg.distribute.GradientReducer`` starts each
bucket's all-reduce as soon as the backward pass has finished its
gradients (the last layers' first), while the pass goes on; the results
are the same bits. Run without the launcher it is that single process.
``--save PATH`` writes each rank's initial (i0, i1, ...) and final (w0,
w1, ...) weights (``{rank}`` in PATH is
replaced by the rank).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import pluggable as pg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import DigitsCNN, accuracy, load_digits  # noqa: E402


def shard_loss(model: DigitsCNN, images, labels, global_batch: int):
    """This shard's summed cross-entropy over the size of the global batch:
    the shards' losses (and gradients) add up to the whole batch's mean."""
    ce = pg.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=model(images))
    return pg.reduce_sum(ce) / float(global_batch)


def train_step(model: DigitsCNN, optimizer, images, labels, global_batch: int,
               bucket_bytes: int, reducer=None):
    """Forward and backward on this rank's shard, gradients summed across
    the ranks (by `reducer`, a GradientReducer, during the backward pass if
    given), the optimizer step. Returns this shard's part of the loss."""
    with pg.GradientTape() as tape:
        loss = shard_loss(model, images, labels, global_batch)
    variables = model.trainable_variables
    if reducer is not None:
        grads = reducer.gradient(tape, loss)
    else:
        grads = pg.distribute.all_reduce_gradients(tape.gradient(loss, variables),
                                                   bucket_bytes=bucket_bytes, op="sum")
    optimizer.apply_gradients(zip(grads, variables))
    return loss


def default_device(local_rank: int, local_world_size: int) -> str:
    """GPU:<local rank> where this host has a GPU for every local process,
    else MY_DEVICE:0 (every replica on the same kind of device, so that the
    replicas compute the same bits)."""
    if len(pg.list_physical_devices("GPU")) >= local_world_size:
        return f"GPU:{local_rank}"
    return "MY_DEVICE:0"


def _join() -> None:
    """init_process_group from the launcher's variables, or a group of one."""
    if "RANK" in os.environ:
        pg.distribute.init_process_group()
    else:
        from pluggable.distribute.run import free_port
        pg.distribute.init_process_group(rank=0, world_size=1, master_port=free_port())


def train(device: str, epochs: int, batch_size: int, learning_rate: float, seed: int,
          max_steps: int | None, bucket_bytes: int, overlap: bool = False) -> tuple:
    """Trains this rank's replica; returns (model, initial weights, epoch
    losses, test accuracy)."""
    rank, world = pg.distribute.get_rank(), pg.distribute.get_world_size()
    x_train, y_train, x_test, y_test = load_digits(seed)
    rng = np.random.default_rng(seed)          # the same stream on every rank
    steps = -(-len(x_train) // batch_size)
    losses, done = [], 0
    with pg.device(device):
        model = DigitsCNN(rng)
        pg.distribute.broadcast_variables(model.trainable_variables, src=0)
        initial = [v.numpy() for v in model.trainable_variables]
        optimizer = pg.optimizers.Adam(learning_rate)
        reducer = pg.distribute.GradientReducer(model.trainable_variables, bucket_bytes,
                                                op="sum") if overlap else None
        for _ in range(epochs):
            order = rng.permutation(len(x_train))
            parts = []
            for step in range(steps):
                if max_steps is not None and done >= max_steps:
                    break
                idx = order[step * batch_size:(step + 1) * batch_size]
                mine = idx[rank::world]
                parts.append(train_step(model, optimizer, pg.constant(x_train[mine]),
                                        pg.constant(y_train[mine]), len(idx), bucket_bytes,
                                        reducer))
                done += 1
            if parts:
                total = pg.distribute.all_reduce(pg.stack(parts), "sum")   # whole-batch losses
                losses.append(float(np.mean(total.numpy())))
        acc = accuracy(model, pg.constant(x_test), y_test)
    return model, initial, losses, acc


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None,
                   help="default: GPU:<LOCAL_RANK> if there is a GPU per process, else MY_DEVICE:0")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--batch-size", type=int, default=32, help="the global batch")
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-bytes", type=int,
                   default=pg.distribute.data_parallel.DEFAULT_BUCKET_BYTES,
                   help="gradients are all-reduced in buckets of about this size")
    p.add_argument("--overlap", action="store_true",
                   help="all-reduce each bucket during the backward pass (GradientReducer)")
    p.add_argument("--save", default=None, help="write the final weights to this .npz")
    args = p.parse_args(argv)
    _join()
    rank, world = pg.distribute.get_rank(), pg.distribute.get_world_size()
    device = args.device or default_device(int(os.environ.get("LOCAL_RANK", 0)),
                                           int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    start = time.perf_counter()
    model, initial, losses, acc = train(device, args.epochs, args.batch_size, args.learning_rate,
                                        args.seed, args.steps, args.bucket_bytes, args.overlap)
    seconds = time.perf_counter() - start
    if args.save:
        np.savez(args.save.replace("{rank}", str(rank)),
                 **{f"w{i}": v.numpy() for i, v in enumerate(model.trainable_variables)},
                 **{f"i{i}": w for i, w in enumerate(initial)})
    if rank == 0:
        shown = ", ".join(f"{v:.4f}" for v in losses)
        print(f"{world} replica(s) on {device}: epoch losses [{shown}], test accuracy "
              f"{acc:.2%}, {seconds:.1f} s", flush=True)
    pg.distribute.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
