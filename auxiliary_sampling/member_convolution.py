"""2-D convolutions over a member axis: M members' kernels applied as one grouped convolution.

`member_conv2d` convolves member m's inputs with member m's kernel for every m at once. Its
forward pass is one grouped `tf.nn.conv2d`; its gradients are TensorFlow's own where the
machine computes them (cuDNN, oneDNN, XLA), else each member's taken by the ops of an
ordinary convolution, which every CPU kernel has (`grouped_conv_gradients_supported` asks once
a process). Also the checked arguments every convolution layer of the suite takes.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from common.validation import check_integer


def padding_argument(padding: str) -> str:
  """Checked 'SAME' | 'VALID' (any case) of a 2-D convolution or pooling."""
  if padding.upper() not in ("SAME", "VALID"):
    raise ValueError(f"padding={padding!r} must be 'SAME' or 'VALID'")
  return padding.upper()


def conv_arguments(filters, kernel_size, padding: str) -> tuple[int, tuple[int, int], str]:
  """Checked (filters, (kh, kw), 'SAME' | 'VALID') of a 2-D convolution layer."""
  kernel_shape = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
  return check_integer("filters", filters), kernel_shape, padding_argument(padding)


MEMBER_CONV_GRADIENTS = ("grouped", "per_member")
_GROUPED_CONV_GRADIENTS_SUPPORTED: dict[str, bool] = {}


def grouped_conv_gradients_supported() -> bool:
  """Whether TensorFlow here takes both gradients of a grouped convolution, asked once a process.

  cuDNN (GPU) and XLA (TPU, and any jit-compiled function) do. On a CPU only
  oneDNN's kernels do: TensorFlow turns them on by default on x86 CPUs with
  AVX-512 VNNI/BF16 or AMX (the Xeons of the committed runs) and leaves them
  off on others (an AVX2-only AMD EPYC, unless TF_ENABLE_ONEDNN_OPTS=1), whose
  Eigen kernels refuse: 'Gradients for grouped convolutions are not supported
  on CPU' (input) and 'filter_size does not have enough elements' (kernel). So
  with a GPU or TPU visible the answer is yes, and otherwise it is what the CPU
  says when asked for both gradients of a tiny grouped convolution.
  """
  if "answer" not in _GROUPED_CONV_GRADIENTS_SUPPORTED:
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
      supported = True
    else:
      with tf.init_scope(), tf.device("/CPU:0"):
        inputs, kernel = tf.zeros([1, 1, 1, 2]), tf.zeros([1, 1, 1, 2])   # 2 groups of 1 channel
        try:
          tf.raw_ops.Conv2DBackpropInput(input_sizes=[1, 1, 1, 2], filter=kernel,
                                         out_backprop=inputs, strides=[1, 1, 1, 1],
                                         padding="VALID")
          tf.raw_ops.Conv2DBackpropFilter(input=inputs, filter_sizes=[1, 1, 1, 2],
                                          out_backprop=inputs, strides=[1, 1, 1, 1],
                                          padding="VALID")
          supported = True
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
          supported = False
    _GROUPED_CONV_GRADIENTS_SUPPORTED["answer"] = supported
  return _GROUPED_CONV_GRADIENTS_SUPPORTED["answer"]


def _strides_4d(strides) -> list[int]:
  """tf.nn.conv2d's NHWC strides (an int, [h, w] or [1, h, w, 1]) as [1, h, w, 1]."""
  strides = [strides] * 2 if isinstance(strides, int) else list(strides)
  if len(strides) == 1:
    strides = strides * 2
  return [1] + strides + [1] if len(strides) == 2 else strides


def _grouped_conv2d(inputs: tf.Tensor, kernels: tf.Tensor, strides, padding: str) -> tf.Tensor:
  """The member convolution as one grouped tf.nn.conv2d (see `member_conv2d`)."""
  members, channels, filters = kernels.shape[0], kernels.shape[-2], kernels.shape[-1]
  batch_shape = tf.shape(inputs)
  grouped_inputs = tf.reshape(tf.transpose(inputs, [1, 2, 3, 0, 4]),
                              tf.concat([batch_shape[1:4], [members * channels]], 0))
  grouped_kernel = tf.reshape(tf.transpose(kernels, [1, 2, 3, 0, 4]),
                              list(kernels.shape[1:3]) + [channels, members * filters])
  outputs = tf.nn.conv2d(grouped_inputs, grouped_kernel, strides, padding)
  out_shape = tf.shape(outputs)
  outputs = tf.reshape(outputs, tf.concat([out_shape[:3], [members, filters]], 0))
  return tf.transpose(outputs, [3, 0, 1, 2, 4])


def _grouped_conv2d_with_member_gradients(inputs: tf.Tensor, kernels: tf.Tensor, strides,
                                          padding: str) -> tf.Tensor:
  """`_grouped_conv2d`, differentiated member by member: each member's input and kernel gradient
  are the gradients TensorFlow registers for its own tf.nn.conv2d (Conv2DBackpropInput and
  Conv2DBackpropFilter with the same attributes), which every CPU kernel computes."""
  conv_strides = _strides_4d(strides)

  @tf.custom_gradient
  def convolve(inputs, kernels):
    def gradient(upstream):
      input_sizes, kernel_sizes = tf.shape(inputs)[1:], tf.shape(kernels)[1:]
      input_gradients, kernel_gradients = [], []
      for member in range(kernels.shape[0]):
        input_gradients.append(tf.raw_ops.Conv2DBackpropInput(
            input_sizes=input_sizes, filter=kernels[member], out_backprop=upstream[member],
            strides=conv_strides, padding=padding))
        kernel_gradients.append(tf.raw_ops.Conv2DBackpropFilter(
            input=inputs[member], filter_sizes=kernel_sizes, out_backprop=upstream[member],
            strides=conv_strides, padding=padding))
      return tf.stack(input_gradients), tf.stack(kernel_gradients)
    return _grouped_conv2d(inputs, kernels, strides, padding), gradient

  # Tensors, not variables: a custom gradient must not read variables it is not given.
  return convolve(tf.convert_to_tensor(inputs), tf.convert_to_tensor(kernels))


def member_conv2d(inputs: tf.Tensor, kernels: tf.Tensor, strides, padding: str,
                  gradients: Optional[str] = None) -> tf.Tensor:
  """Convolves [M, B, H, W, C] inputs with [M, h, w, C, F] kernels (member m with kernel m) as one
  grouped convolution, -> [M, B, H', W', F].

  `gradients`: how the convolution is differentiated. 'grouped': TensorFlow's
  own gradients of the grouped convolution (cuDNN, oneDNN, XLA); 'per_member':
  the same forward pass, with each member's input and kernel gradients taken
  by the ops of an ordinary convolution, which TensorFlow's default (Eigen) CPU
  kernels also have; None: 'grouped' where `grouped_conv_gradients_supported`,
  else 'per_member'. The two agree to round-off (the forward pass is the same
  op); a run where the grouped gradients worked computes what it did.
  """
  if gradients is None:
    gradients = "grouped" if grouped_conv_gradients_supported() else "per_member"
  if gradients not in MEMBER_CONV_GRADIENTS:
    raise ValueError(f"gradients={gradients!r}; allowed: None, "
                     f"{', '.join(repr(g) for g in MEMBER_CONV_GRADIENTS)}")
  if gradients == "grouped":
    return _grouped_conv2d(inputs, kernels, strides, padding)
  return _grouped_conv2d_with_member_gradients(inputs, kernels, strides, padding)
