"""``pg.sparse``: sparse tensors (``pg.SparseTensor``, TensorFlow's
``tf.sparse``)::

    st = pg.SparseTensor(indices=[[0, 0], [1, 2]], values=[1.0, 2.0], dense_shape=[3, 4])
    pg.sparse.to_dense(st)
    pg.sparse.sparse_dense_matmul(st, pg.ones([4, 2]))
    pg.sparse.reduce_sum(st, axis=1)
"""
from .sparse_ops import (add, concat, expand_dims, from_dense, reduce_sum, reorder,  # noqa: F401
                         sparse_dense_matmul, to_dense)
from .sparse_tensor import SparseTensor

matmul = sparse_dense_matmul

__all__ = ["SparseTensor", "add", "concat", "expand_dims", "from_dense", "matmul",
           "reduce_sum", "reorder", "sparse_dense_matmul", "to_dense"]
