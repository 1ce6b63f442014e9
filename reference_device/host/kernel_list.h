/* Host reference device: the kernel entry points init_kernels.c registers.
 *
 * compute functions have the signature TF_NewKernelBuilder expects:
 * void (*)(void* kernel, TF_OpKernelContext* ctx); kernels with attributes
 * also have a create function (reads the attributes once per kernel
 * instance) and a delete function. */
#ifndef MY_DEVICE_KERNEL_LIST_H_
#define MY_DEVICE_KERNEL_LIST_H_

#include "kernels.h"

#pragma GCC visibility push(hidden)

#define MD_DECLARE_COMPUTE(NAME)                                              \
  void md_compute_##NAME(void* kernel, TF_OpKernelContext* ctx);
#define MD_DECLARE_STATE(NAME)                                                \
  void* md_create_##NAME(TF_OpKernelConstruction* ctx);                       \
  void md_delete_##NAME(void* kernel);

/* kernels_binary.c: broadcasting arithmetic */
MD_DECLARE_COMPUTE(add)
MD_DECLARE_COMPUTE(sub)
MD_DECLARE_COMPUTE(mul)
MD_DECLARE_COMPUTE(div)
MD_DECLARE_COMPUTE(maximum)
MD_DECLARE_COMPUTE(minimum)
MD_DECLARE_COMPUTE(pow)
MD_DECLARE_COMPUTE(floordiv)
MD_DECLARE_COMPUTE(floormod)

/* kernels_complex.c: complex64 / complex128 arithmetic and parts */
MD_DECLARE_COMPUTE(complex_add)
MD_DECLARE_COMPUTE(complex_sub)
MD_DECLARE_COMPUTE(complex_mul)
MD_DECLARE_COMPUTE(complex_neg)
MD_DECLARE_COMPUTE(complex)
MD_DECLARE_COMPUTE(conj)
MD_DECLARE_COMPUTE(real)
MD_DECLARE_COMPUTE(imag)

/* kernels_unary.c */
MD_DECLARE_COMPUTE(neg)
MD_DECLARE_COMPUTE(abs)
MD_DECLARE_COMPUTE(exp)
MD_DECLARE_COMPUTE(log)
MD_DECLARE_COMPUTE(sqrt)
MD_DECLARE_COMPUTE(tanh)
MD_DECLARE_COMPUTE(sigmoid)
MD_DECLARE_COMPUTE(relu)
MD_DECLARE_COMPUTE(square)
MD_DECLARE_COMPUTE(sign)
MD_DECLARE_COMPUTE(rsqrt)
MD_DECLARE_COMPUTE(erf)
MD_DECLARE_COMPUTE(floor)
MD_DECLARE_COMPUTE(round)
MD_DECLARE_COMPUTE(sin)
MD_DECLARE_COMPUTE(cos)
MD_DECLARE_COMPUTE(tan)
MD_DECLARE_COMPUTE(asin)
MD_DECLARE_COMPUTE(acos)
MD_DECLARE_COMPUTE(atan)
MD_DECLARE_COMPUTE(sinh)
MD_DECLARE_COMPUTE(cosh)
MD_DECLARE_COMPUTE(asinh)
MD_DECLARE_COMPUTE(acosh)
MD_DECLARE_COMPUTE(atanh)
MD_DECLARE_COMPUTE(expm1)
MD_DECLARE_COMPUTE(log1p)
MD_DECLARE_COMPUTE(erfc)
MD_DECLARE_COMPUTE(ceil)
MD_DECLARE_COMPUTE(reciprocal)
MD_DECLARE_COMPUTE(check_numerics)
MD_DECLARE_STATE(check_numerics)
/* Gelu and GeluGrad (kernels_grad.c) share this state. */
typedef struct md_gelu_kernel {
  int approximate; /* the `approximate` attribute (default false) */
} md_gelu_kernel;
MD_DECLARE_COMPUTE(gelu)
MD_DECLARE_STATE(gelu)

/* kernels_grad.c: gradients of element-wise ops */
MD_DECLARE_COMPUTE(relu_grad)
MD_DECLARE_COMPUTE(sigmoid_grad)
MD_DECLARE_COMPUTE(tanh_grad)
MD_DECLARE_COMPUTE(rsqrt_grad)
MD_DECLARE_COMPUTE(sqrt_grad)
MD_DECLARE_COMPUTE(gelu_grad)

/* kernels_compare.c: bool results */
MD_DECLARE_COMPUTE(less)
MD_DECLARE_COMPUTE(less_equal)
MD_DECLARE_COMPUTE(greater)
MD_DECLARE_COMPUTE(greater_equal)
MD_DECLARE_COMPUTE(equal)
MD_DECLARE_COMPUTE(not_equal)
MD_DECLARE_STATE(equality)
MD_DECLARE_COMPUTE(logical_and)
MD_DECLARE_COMPUTE(logical_or)
MD_DECLARE_COMPUTE(logical_not)

/* kernels_select.c */
MD_DECLARE_COMPUTE(select)
MD_DECLARE_COMPUTE(select_v2)

/* kernels_softmax.c, kernels_xent.c */
MD_DECLARE_COMPUTE(softmax)
MD_DECLARE_COMPUTE(log_softmax)
MD_DECLARE_COMPUTE(softmax_xent)
MD_DECLARE_COMPUTE(sparse_softmax_xent)

/* kernels_matmul.c: the state is the two transpose / adjoint flags. */
MD_DECLARE_COMPUTE(matmul)
MD_DECLARE_STATE(matmul)
MD_DECLARE_COMPUTE(batch_matmul)
void* md_create_batch_matmul(TF_OpKernelConstruction* ctx);

/* kernels_reduce.c: the reductions' state is the keep_dims flag. */
MD_DECLARE_COMPUTE(sum)
MD_DECLARE_COMPUTE(mean)
MD_DECLARE_COMPUTE(max)
MD_DECLARE_COMPUTE(min)
MD_DECLARE_COMPUTE(prod)
MD_DECLARE_STATE(reduction)
MD_DECLARE_COMPUTE(argmax)
MD_DECLARE_COMPUTE(argmin)

/* kernels_scan.c, kernels_topk.c, kernels_addn.c, kernels_segment.c */
MD_DECLARE_COMPUTE(cumsum)
MD_DECLARE_STATE(cumsum)
MD_DECLARE_COMPUTE(topk)
MD_DECLARE_COMPUTE(addn)
MD_DECLARE_COMPUTE(unsorted_segment_sum)

/* kernels_cast.c */
MD_DECLARE_COMPUTE(cast)

/* kernels_shape.c: shape changes */
MD_DECLARE_COMPUTE(transpose)
MD_DECLARE_COMPUTE(reshape)
MD_DECLARE_COMPUTE(expand_dims)
MD_DECLARE_COMPUTE(squeeze)
MD_DECLARE_STATE(squeeze)
MD_DECLARE_COMPUTE(identity)

/* kernels_fill.c: generated values */
MD_DECLARE_COMPUTE(fill)
MD_DECLARE_COMPUTE(zeros_like)
MD_DECLARE_COMPUTE(ones_like)
MD_DECLARE_COMPUTE(range)

/* kernels_slice.c: the strided slices' state is the five masks. */
MD_DECLARE_COMPUTE(strided_slice)
MD_DECLARE_COMPUTE(strided_slice_grad)
MD_DECLARE_STATE(strided_slice)
MD_DECLARE_COMPUTE(slice)

/* kernels_concat.c: list arguments; Pack / Unpack's state is `axis`. */
MD_DECLARE_COMPUTE(concat_v2)
MD_DECLARE_COMPUTE(pack)
MD_DECLARE_COMPUTE(unpack)
MD_DECLARE_STATE(axis_attr)
MD_DECLARE_COMPUTE(split)

/* kernels_pad.c */
MD_DECLARE_COMPUTE(pad)
MD_DECLARE_COMPUTE(tile)
MD_DECLARE_COMPUTE(broadcast_to)

/* kernels_gather.c */
MD_DECLARE_COMPUTE(gather)
MD_DECLARE_STATE(gather)
MD_DECLARE_COMPUTE(gather_nd)
MD_DECLARE_COMPUTE(one_hot)
MD_DECLARE_STATE(one_hot)

/* kernels_conv.c: the three share one state (strides, padding, ...). */
MD_DECLARE_COMPUTE(conv2d)
MD_DECLARE_COMPUTE(conv2d_backprop_input)
MD_DECLARE_COMPUTE(conv2d_backprop_filter)
MD_DECLARE_STATE(conv2d)

/* kernels_pool.c: the four share one state (ksize, strides, ...). */
MD_DECLARE_COMPUTE(max_pool)
MD_DECLARE_COMPUTE(max_pool_grad)
MD_DECLARE_COMPUTE(avg_pool)
MD_DECLARE_COMPUTE(avg_pool_grad)
MD_DECLARE_STATE(pool)

/* kernels_bias.c: the state is data_format. */
MD_DECLARE_COMPUTE(bias_add)
MD_DECLARE_COMPUTE(bias_add_grad)
MD_DECLARE_STATE(bias)

/* kernels_batchnorm.c */
MD_DECLARE_COMPUTE(fused_batch_norm)
MD_DECLARE_COMPUTE(fused_batch_norm_grad)
MD_DECLARE_STATE(batch_norm)

/* kernels_random.c */
MD_DECLARE_COMPUTE(random_uniform)
MD_DECLARE_COMPUTE(random_normal)
MD_DECLARE_COMPUTE(truncated_normal)

/* kernels_training.c: registers its own kernels (variable updates). */
void md_register_training_kernels(void);
/* kernels_fused.c: _FusedMatMul and _FusedConv2D (registers its own). */
void md_register_fused_kernels(void);

/* kernels_collective.c: CollectiveReduceV2, CollectiveReduceScatterV2,
 * CollectiveGatherV2, CollectiveBcastSendV2 / RecvV2 across the devices
 * (one compute function; the create functions set the kind). */
MD_DECLARE_COMPUTE(coll)
void* md_create_coll_reduce(TF_OpKernelConstruction* ctx);
void* md_create_coll_reduce_scatter(TF_OpKernelConstruction* ctx);
void* md_create_coll_gather(TF_OpKernelConstruction* ctx);
void* md_create_coll_send(TF_OpKernelConstruction* ctx);
void* md_create_coll_recv(TF_OpKernelConstruction* ctx);
void md_delete_coll(void* kernel);

#undef MD_DECLARE_COMPUTE
#undef MD_DECLARE_STATE

#pragma GCC visibility pop

#endif /* MY_DEVICE_KERNEL_LIST_H_ */
