"""The paper's UCI network (one hidden layer of 50 ReLU units) for every method."""
from __future__ import annotations

from typing import Optional

import tf_keras

from auxiliary_sampling.layers import DenseReparameterization
from methods.trainers import deep_ensemble
from methods.trainers import mnf
from methods.trainers import particles
from methods import network_kinds
from methods.registry import Networks
from uci.config import UciConfig
from methods.trainers.gaussian_head import HomoscedasticNoise


def mean_field_network(hidden_units: int, initial_noise_scale: float,
                       num_members: Optional[int] = None,
                       empirical_bayes_prior: bool = True,
                       prior_scale: float = 1.0, num_hidden_layers: int = 1) -> tf_keras.Sequential:
  """Gaussian mean-field weights (priors N(0, `prior_scale`^2), the scale learned per tensor with
  `empirical_bayes_prior`), then the learned homoscedastic noise scale."""
  prior = dict(num_members=num_members, trainable_prior_scale=empirical_bayes_prior,
               prior_scale=prior_scale)
  hidden = [DenseReparameterization(hidden_units, activation="relu", **prior)
            for _ in range(num_hidden_layers)]
  return tf_keras.Sequential(hidden + [
      DenseReparameterization(1, kernel_initializer="glorot_uniform", **prior),
      HomoscedasticNoise(num_members=num_members, initial_scale=initial_noise_scale)])


def uci_networks(config: UciConfig) -> Networks:
  """VI, MNF (with the same learned noise scale), the heteroscedastic ensemble and the SVGD
  particles (a learned noise scale each)."""
  def mean_field(num_members):
    prior_scale, learned = config.mean_field_prior()
    return mean_field_network(config.hidden_units, config.initial_noise_scale, num_members,
                              learned, prior_scale, config.num_hidden_layers)

  def mnf_network():
    mean_network = mnf.regression_mnf(config.hidden_units, seed=config.seed)
    return tf_keras.Sequential(mean_network.layers +
                               [HomoscedasticNoise(initial_scale=config.initial_noise_scale)])

  def ensemble(num_members):
    return deep_ensemble.regression_ensemble(num_members, config.hidden_units,
                                             config.num_hidden_layers, seed=config.seed)

  def particle_networks(num_particles):
    return particles.regression_particles(num_particles, config.hidden_units,
                                          config.num_hidden_layers, config.initial_noise_scale,
                                          seed=config.seed,
                                          initializer=config.particle_initializer)

  return Networks(builders={network_kinds.MEAN_FIELD: mean_field, network_kinds.MNF: mnf_network,
                            network_kinds.ENSEMBLE: ensemble,
                            network_kinds.PARTICLES: particle_networks})
