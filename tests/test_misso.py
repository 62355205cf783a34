"""methods.trainers.misso and methods.trainers.momentum: the MISSO update against its definition
(Eq. 7), its
exact convergence on a finite sum, its blocks and initialisation pass; momentum SGD's recurrence."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling.elbo_objective import ElboObjective
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.training_loop import TrainingLoop
from methods.trainers.gaussian_head import HomoscedasticNoise, gaussian_head_log_likelihood
from methods.trainers.misso import BlockBatches, IncrementalSurrogateOptimizer, SurrogateUpdate
from methods.trainers.momentum import MomentumSgd
from methods.trainers.vi import MeanFieldTrainer

# A finite sum of quadratics: block i's loss is a_i / 2 |theta - c_i|^2.
CURVATURES = np.array([1.0, 3.0, 0.5, 2.0, 1.5])
CENTRES = np.array([[1.0, -2.0], [0.0, 1.0], [4.0, 0.5], [-1.0, -1.0], [2.0, 3.0]])
MINIMISER = (CURVATURES[:, None] * CENTRES).sum(0) / CURVATURES.sum()


def _block_gradient(theta, block):
  return CURVATURES[block] * (theta - CENTRES[block])


def _reference_misso(theta, blocks, step_size):
  """Eq. 7 as written: every block's (iterate, gradient) kept, the sums taken afresh each step."""
  num_blocks = len(CURVATURES)
  iterates, gradients = [None] * num_blocks, [None] * num_blocks
  for count, block in enumerate(blocks):
    iterates[block], gradients[block] = theta.copy(), _block_gradient(theta, block)
    if count >= num_blocks:
      theta = np.mean(iterates, 0) - step_size * np.mean(gradients, 0)
  return theta


def _optimizer_run(blocks, step_size, start):
  theta = tf.Variable(start, dtype=tf.float64)
  optimizer = IncrementalSurrogateOptimizer([theta], len(CURVATURES))
  for block in blocks:
    optimizer.block.assign(block)
    optimizer.apply([tf.constant(_block_gradient(theta.numpy(), block))], step_size)
  return theta.numpy(), optimizer


def test_misso_update_is_eq_7_and_reaches_the_exact_minimiser_at_a_constant_step():
  """The incremental sums equal Eq. 7's sums over stored pairs, and MISSO converges to the
  finite sum's minimiser where SGD at the same constant step keeps hovering around it. Catches a
  sum that adds the new pair without removing the old one, an update during the initialisation
  pass, and a step size applied to the sum of gradients instead of their mean."""
  rng = np.random.default_rng(0)
  blocks = list(range(5)) + list(rng.integers(0, 5, size=600))
  start = np.array([10.0, -10.0])
  early, _ = _optimizer_run(blocks[:12], 0.3, start)   # far from converged: every term counts
  np.testing.assert_allclose(early, _reference_misso(start, blocks[:12], 0.3), rtol=1e-9)
  assert np.linalg.norm(early - MINIMISER) > 1.0
  theta, optimizer = _optimizer_run(blocks, 0.3, start)
  np.testing.assert_allclose(theta, _reference_misso(start, blocks, 0.3), rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(theta, MINIMISER, atol=1e-6)
  np.testing.assert_allclose(optimizer.gradient_sums[0].numpy(),
                             optimizer.stored_gradients[0].numpy().sum(0), atol=1e-9)
  sgd = start.copy()
  for block in blocks:
    sgd -= 0.3 * _block_gradient(sgd, block)
  assert np.linalg.norm(sgd - MINIMISER) > 1e-2
  still, _ = _optimizer_run(list(range(5)), 0.3, start)
  np.testing.assert_array_equal(still, start)   # the initialisation pass does not move


def test_momentum_sgd_is_the_heavy_ball_recurrence():
  variable = tf.Variable([1.0, -2.0])
  optimizer = MomentumSgd([variable], momentum=0.5)
  expected, velocity = np.array([1.0, -2.0]), np.zeros(2)
  for gradient in ([1.0, 0.5], [0.2, -1.0], [0.0, 2.0]):
    optimizer.apply([tf.constant(gradient)], tf.constant(0.1))
    velocity = 0.5 * velocity + np.array(gradient)
    expected = expected - 0.1 * velocity
  np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)
  with pytest.raises(ValueError, match="momentum=1.0 is out of range"):
    MomentumSgd([variable], momentum=1.0)


def _regression(num_examples=100, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=[num_examples, 3]).astype(np.float32)
  y = (x @ np.array([[1.0], [-1.0], [0.5]]) + 0.3 * rng.normal(size=[num_examples, 1]))
  return x, y.astype(np.float32)


def _mean_field_network():
  return tf_keras.Sequential([DenseReparameterization(8, activation="relu"),
                              DenseReparameterization(1), HomoscedasticNoise()])


def test_misso_blocks_partition_the_data_and_the_first_pass_visits_each_once():
  """Catches blocks redrawn per step (they must be fixed: a surrogate belongs to its examples), a
  block lookup that names the wrong block, and an initialisation pass that skips blocks."""
  x, y = _regression()
  tf.keras.utils.set_random_seed(0)
  model = _mean_field_network()
  model(x[:1])
  batches = BlockBatches(x, y, 32, data_seed=3)
  surrogates = IncrementalSurrogateOptimizer(model.trainable_variables, batches.num_blocks)
  loop = TrainingLoop(ElboObjective(model, gaussian_head_log_likelihood),
                      SurrogateUpdate(surrogates, batches), batches, data_seed=3)
  blocks = batches.blocks.numpy()
  assert blocks.shape == (4, 32) and set(blocks.ravel()) == set(range(100))
  assert len(set(blocks[:, 0])) == 4
  first_pass = batches.example_indices(tf.constant([3, 1], tf.int64), tf.constant(1, tf.int64),
                                       4).numpy()
  np.testing.assert_array_equal(first_pass, blocks)
  later = batches.example_indices(tf.constant([3, 9], tf.int64), tf.constant(9, tf.int64), 50)
  for rows in later.numpy():
    block = batches.block_starts.numpy()[rows[0]]
    np.testing.assert_array_equal(rows, blocks[block])
  start = [v.numpy() for v in model.trainable_variables]
  loop.maximize(4, 1e-2)
  for before, variable in zip(start, model.trainable_variables):
    np.testing.assert_array_equal(before, variable.numpy())
  assert np.all(np.abs(surrogates.stored_gradients[0].numpy()).sum(axis=(1, 2)) > 0)


def test_vi_by_misso_and_momentum_raises_the_elbo_and_refuses_unknown_optimisers():
  x, y = _regression()
  for optimizer, learning_rate in (("misso", 5e-2), ("momentum", 1e-2)):
    tf.keras.utils.set_random_seed(0)
    trainer = MeanFieldTrainer(_mean_field_network(), x, y, gaussian_head_log_likelihood,
                               learning_rate=learning_rate, batch_size=25, optimizer=optimizer,
                               steps_per_checkpoint=400)
    trace = trainer.train(800).trace
    assert np.mean(trace[-50:]) > np.mean(trace[:50]) + 50, optimizer
  with pytest.raises(ValueError, match="optimizer='lbfgs' is not known; allowed: adam, momentum"):
    MeanFieldTrainer(_mean_field_network(), x, y, gaussian_head_log_likelihood,
                     optimizer="lbfgs")
