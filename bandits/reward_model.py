"""The mushroom bandit's reward model: the paper's network with an optional member axis.

A context and an action in, the predicted mean reward of that action and the Gaussian noise
scale out (`RewardModel`). The network maps the context to one mean per action (`per_action`)
or context and action to one mean (`action_input`); its weights are mean-field Gaussian (the
Thompson samplers') or point weights (eps_greedy, the particle agents'), every member's drawn
from its own seed (`reward_model`).
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf
import tf_keras

from auxiliary_sampling.graph_loops import no_autograph
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.noise import derived_seed
from bandits.config import BanditConfig
from bandits.mushroom import NUM_ACTIONS, NUM_FEATURES
from methods.trainers.deep_ensemble import MemberDense, independent_member_initializer
from methods.trainers.gaussian_head import HomoscedasticNoise


class RewardModel(tf_keras.layers.Layer):
  """Gaussian reward model: inputs [M?, batch, F + 1] (context features, then the action 0/1) ->
  [M, batch, 2], the predicted mean reward of that action and the noise scale.

  `per_action`: the network maps the context to one mean per action and the
  input's action picks one; `action_input`: the network maps context and
  action to one mean.
  """

  def __init__(self, layers: Sequence[tf_keras.layers.Layer], noise: HomoscedasticNoise,
               reward_model: str, **kwargs):
    super().__init__(**kwargs)
    self.network_layers = list(layers)
    self.noise = noise
    self.reward_model = reward_model

  def _network(self, inputs: tf.Tensor) -> tf.Tensor:
    for layer in self.network_layers:
      inputs = layer(inputs)
    return inputs

  def network_inputs(self, inputs: tf.Tensor) -> tf.Tensor:
    """What the network takes of [..., F + 1] inputs: all (action_input) or the context."""
    return inputs if self.reward_model == "action_input" else inputs[..., :-1]

  def action_value(self, outputs: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
    """[...] predicted mean reward of each input's action from the network's [..., outputs]."""
    if self.reward_model == "action_input":
      return outputs[..., 0]
    return tf.where(inputs[..., -1] > 0.5, outputs[..., 1], outputs[..., 0])

  @no_autograph
  def call(self, inputs, training=None):
    del training
    means = self.action_value(self._network(self.network_inputs(inputs)), inputs)
    return self.noise(means[..., tf.newaxis])

  def action_means(self, contexts: tf.Tensor) -> tf.Tensor:
    """[M, batch, NUM_ACTIONS]: every action's predicted mean reward for contexts [M, batch, F],
    all from one forward pass (so one weight draw under per_batch noise)."""
    if self.reward_model == "per_action":
      return self._network(contexts)
    batch = tf.shape(contexts)[1]
    both = tf.concat([tf.concat([contexts, tf.fill(tf.concat([tf.shape(contexts)[:2], [1]], 0),
                                                   float(action))], -1)
                      for action in range(NUM_ACTIONS)], axis=1)
    means = self._network(both)[..., 0]
    return tf.stack([means[:, action * batch:(action + 1) * batch]
                     for action in range(NUM_ACTIONS)], axis=-1)


def reward_model(config: BanditConfig, num_members: int, bayesian: bool, seed: int,
                 num_features: int = NUM_FEATURES) -> RewardModel:
  """The paper's network: `num_hidden_layers` of `hidden_units` ReLU units, mean-field Gaussian
  weights under a fixed N(0, prior_scale^2) prior (`bayesian`) or point weights, and a Gaussian
  reward likelihood whose scale is fixed or learned (`--noise_scale`).

  Every member's kernels (posterior means) are drawn He-normal from their own seed, as separate
  networks would be; so a model is the same whenever it is built from the same seed.
  """
  outputs = NUM_ACTIONS if config.reward_model == "per_action" else 1
  inputs = num_features + (config.reward_model == "action_input")
  widths = [config.hidden_units] * config.num_hidden_layers + [outputs]
  activations = ["relu"] * config.num_hidden_layers + [None]
  layers = []
  for index, (fan_in, units, activation) in enumerate(zip([inputs] + widths, widths,
                                                          activations)):
    if bayesian:
      initializer = independent_member_initializer(
          tf_keras.initializers.HeNormal(), derived_seed(seed, index), [fan_in, units])
      layers.append(DenseReparameterization(
          units, activation=activation, num_members=num_members, kernel_initializer=initializer,
          prior_scale=config.prior_scale, trainable_prior_scale=False,
          untransformed_scale_init=config.initial_untransformed_posterior_scale))
    else:
      layers.append(MemberDense(units, num_members, activation=activation,
                                seed=derived_seed(seed, index)))
  fixed_scale = config.fixed_noise_scale
  noise = HomoscedasticNoise(num_members=num_members, learned=fixed_scale is None,
                             initial_scale=fixed_scale or config.initial_noise_scale)
  return RewardModel(layers, noise, config.reward_model)
