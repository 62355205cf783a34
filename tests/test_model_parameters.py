"""model_parameters: which mean-field parameters a model has, and in which order."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling.layers import DenseReparameterization, LayerChain
from auxiliary_sampling.model_parameters import mean_field_parameters, model_kl, num_members_of
from auxiliary_sampling.parameters import softplus_inverse


def test_parameters_come_in_construction_order_through_nested_containers():
  """The order decides each parameter's random stream and the trained-to-copy pairing.

  Mutation: listing layers with the public `tf.Module.submodules` (breadth first, by attribute
  name) puts the outer layer's kernel before the nested chain's.
  """
  first, second, third = (DenseReparameterization(units) for units in (3, 4, 2))
  model = tf_keras.Sequential([LayerChain([first, second]), third])
  model(tf.zeros([2, 5]))
  expected = [first.kernel, first.bias, second.kernel, second.bias, third.kernel, third.bias]
  assert [id(p) for p in mean_field_parameters(model)] == [id(p) for p in expected]
  total = sum(float(layer.kl_divergence()) for layer in (first, second, third))
  assert float(model_kl(model)) == pytest.approx(total, rel=1e-6)
  assert num_members_of(model) is None


def test_mixed_member_axes_and_models_without_parameters_are_errors():
  two, three = DenseReparameterization(3, num_members=2), DenseReparameterization(1, num_members=3)
  for layer in (two, three):
    layer(tf.zeros([2, 5]))
  with pytest.raises(ValueError, match=r"mixes member-axis sizes \[2, 3\]"):
    num_members_of(LayerChain([two, three]))
  with pytest.raises(ValueError, match="has no Gaussian mean-field parameters"):
    model_kl(tf_keras.Sequential([tf_keras.layers.Dense(1)]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_inverse_equals_tensorflow_probability_bit_for_bit(dtype):
  """Ours replaced tfp.math.softplus_inverse in every posterior-scale write so that no run imports
  TensorFlow Probability; catches a formula or threshold that differs from it in the last bit,
  which would move every rerun's numbers away from the committed runs'. Both tails included."""
  import tensorflow_probability as tfp
  eps_threshold = np.exp(np.log(np.finfo(dtype).eps) + 2.0)
  values = np.concatenate([
      np.logspace(np.log10(np.finfo(dtype).tiny), np.log10(np.finfo(dtype).max) - 1, 2000),
      [eps_threshold * 0.999, eps_threshold, eps_threshold * 1.001, 1e-3, 0.5, 1.0, 40.0]
  ]).astype(dtype)
  ours = softplus_inverse(values).numpy()
  np.testing.assert_array_equal(ours, tfp.math.softplus_inverse(values).numpy())
  middle = (values > 1e-3) & (values < 30)
  np.testing.assert_allclose(tf.math.softplus(ours[middle]).numpy(), values[middle], rtol=1e-5)
