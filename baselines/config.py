"""Settings of the methods every benchmark compares (paper Section 4.1 defaults).

A benchmark's config extends `MethodConfig` with its data and architecture.
No TensorFlow here: the binaries check flags before it loads.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from auxiliary_sampling.schedule import LEARNING_RATE_RULES, AuxiliarySchedule
from auxiliary_sampling.weight_noise import WEIGHT_NOISE
from baselines.vogn_settings import CURVATURES, PRIORS, VognSettings
from baselines.learning_rate import LearningRateSchedule
from common.config import NOTHING, RESULTS, UsageError, setting, with_default
from common.distribution import DeviceConfig

VI_FAMILY = ("vi", "refined_vi", "vi_equal_compute")
# The same mean-field posterior fitted by VOGN (baselines.vogn), then used or refined.
VOGN_FAMILY = ("vogn", "refined_vogn")
# Particle posteriors (baselines.particles): weight-space and function-space SVGD.
PARTICLE_METHODS = ("svgd", "fsvgd")
# Methods of every network a benchmark builds (the particles are UCI's only, so far).
NETWORK_METHODS = VI_FAMILY + ("mnf", "deep_ensemble") + VOGN_FAMILY
METHODS = NETWORK_METHODS + PARTICLE_METHODS
# VI's optimisers (baselines.vi.MeanFieldTrainer): the paper's Adam, momentum SGD and MISSO.
VI_OPTIMIZERS = ("adam", "momentum", "misso")
# Methods that refine the mean-field posterior they start from (paper Algorithm 1).
REFINED = ("refined_vi", "refined_vogn")

# Checkpoints a setting can shape (common.config `shapes`): the VI model, the further
# training of vi_equal_compute, MNF, the ensemble, VOGN's model and the particles.
VI, EXTRA_VI, MNF, ENSEMBLE, VOGN, PARTICLES = ("vi", "extra_vi", "mnf", "deep_ensemble", "vogn",
                                                "particles")
# The f-POVI paper's UCI protocol (Wang et al. 2019, Appendix B.2.1): batch 100 for 500 epochs,
# or batch 1000 for 3000 epochs on datasets of more than 1,000 examples (training sets of more
# than 900 in its 90/10 splits).
PARTICLE_SMALL_DATA, PARTICLE_LARGE_DATA = (100, 500), (1000, 3000)
PARTICLE_LARGE_TRAINING_SET = 900


# Initial weights of the particles: the deep ensemble's (He-normal hidden, Glorot-uniform output)
# or the f-POVI authors' N(0, 1 / (fan_in + fan_out + 1)) on every kernel.
PARTICLE_INITIALIZERS = ("he_glorot", "fpovi")


@dataclasses.dataclass
class MethodConfig(DeviceConfig):
  """What `baselines.methods.train_method` needs, whatever the benchmark."""

  # Whether the benchmark's mean-field networks have point-estimated weights (deterministic
  # layers, batch norm) that refinement could refit per member (`refit_deterministic`).
  has_deterministic_weights: ClassVar[bool] = False

  method: str = setting("refined_vi", "Method to train and evaluate.", choices=METHODS,
                        shapes=RESULTS)
  # Compiling refinement's or the ensemble's loop acts on those methods' runs only, so the
  # commands of a table leave these flags out of the other methods' lines.
  jit_compile_refinement: bool = with_default(DeviceConfig, "jit_compile_refinement",
                                              only_when=("method", REFINED))
  jit_compile_ensemble: bool = with_default(DeviceConfig, "jit_compile_ensemble",
                                            only_when=("method", "deep_ensemble"))
  seed: int = setting(0, "Seed of the split, the initialisation and every random stream.",
                      minimum=0)
  batch_size: int = setting(256, "Global minibatch of every Adam step, split evenly over replicas.",
                           minimum=1)
  learning_rate: float = setting(1e-3, "Adam learning rate of VI, MNF and the ensemble.", above=0)
  vi_steps: int = setting(30_000, "Adam steps of mean-field VI.", minimum=1, shapes=(EXTRA_VI,))
  empirical_bayes_prior: bool = setting(
      True, "Learn one prior scale per weight tensor (else a fixed N(0, 1) prior).",
      shapes=(VI, EXTRA_VI))
  num_samples: int = setting(10, "M: posterior samples (refined samples) in the predictive.",
                             minimum=1, shapes=RESULTS)
  num_eval_samples: int = setting(
      0, "vi, vi_equal_compute, mnf: posterior draws in the predictive (0: M, --num_samples; the "
      "authors' ResNet-20 code scored VI with 1).", minimum=0, shapes=RESULTS)
  num_auxiliary: int = setting(5, "K: auxiliary variables per refined sample.", minimum=1,
                               shapes=RESULTS)
  variance_ratio: float = setting(
      0.7, "Each auxiliary variable's share of the remaining prior variance.", above=0, below=1,
      shapes=RESULTS)
  steps_per_auxiliary: int = setting(200,
                                     "T: Adam steps of refinement after each auxiliary variable.",
                                     minimum=0, shapes=RESULTS)
  refine_learning_rate_rule: str = setting(
      "paper", "Refinement learning rates: paper (1e-3 scaled by the conditional prior's std) or "
      "authors_code (the public code's 1e-5 rule).", choices=LEARNING_RATE_RULES, shapes=RESULTS)
  refine_weight_noise: str = setting(
      "per_example",
      "Refinement's weight noise: per_example (local reparameterisation, Flipout) or "
      "per_batch (one weight draw per member and step: faster, noisier).", choices=WEIGHT_NOISE,
      shapes=RESULTS)
  refit_deterministic: bool = setting(
      False,
      "refined_vi: also refit each member's own copy of the network's point-estimated weights "
      "(deterministic layers, batch norm), as the authors' Keras refit did; else only the "
      "Bayesian layers' posteriors move (paper Algorithm 1).", shapes=RESULTS)
  equal_compute_steps: int = setting(
      -1, "vi_equal_compute: extra VI steps; -1 means M * K * T, the Adam steps refinement spends.",
      minimum=-1, shapes=RESULTS)
  elbo_num_samples: int = setting(10, "Posterior draws per example in the whole-training-set ELBO.",
                                  minimum=1, shapes=RESULTS)
  stage_elbo_aux: bool = setting(
      False,
      "refined_vi: whole-training-set ELBO_aux after every stage (Figure 4 without minibatch "
      "noise; the refined samples are unchanged).", shapes=RESULTS)
  stage_elbo_aux_examples: int = setting(
      0, "refined_vi with --stage_elbo_aux: estimate each stage's ELBO_aux (and the start's) on "
      "this many training examples, evenly spaced, their log-likelihood scaled to the whole set, "
      "with the same weight draws at every stage (0: the whole set). The final ELBO_aux is always "
      "the whole set's.", minimum=0, shapes=RESULTS, only_with="stage_elbo_aux")
  prepare_refinement: bool = setting(
      True, "refined_vi, refined_vogn on one device: trace (and with --jit_compile_refinement "
      "compile) the refinement on a second thread while VI trains, so that it starts at once "
      "after; the results are the same either way, VI's recorded seconds include sharing the "
      "CPU (benchmarks.uci_run_time).", shapes=NOTHING)
  mnf_steps: int = setting(30_000, "Adam steps of MNF.", minimum=1, shapes=RESULTS)
  ensemble_members: int = setting(10, "Members of the deep ensemble.", minimum=1,
                                  shapes=(ENSEMBLE,))
  ensemble_steps: int = setting(5_000, "Adam steps of every ensemble member.", minimum=1,
                                shapes=RESULTS)
  adversarial_epsilon: float = setting(
      0.01, "Deep ensemble: size of the adversarial input perturbation (0: none).", minimum=0,
      shapes=(ENSEMBLE,))
  vogn_learning_rate: float = setting(
      1e-2, "vogn, refined_vogn: alpha, VOGN's step size (and Adam's for point estimates such as "
      "a noise scale); they train for --vi_steps steps. 1e-2 gave the highest training ELBO of "
      "1e-3 .. 1e-1 on UCI (results/related/README.md).", above=0, maximum=1.0, shapes=(VOGN,))
  vogn_momentum: float = setting(0.9, "VOGN: beta_1, momentum of the mean's update.", minimum=0,
                                 below=1, shapes=(VOGN,))
  vogn_curvature_decay: float = setting(
      0.999, "VOGN: beta_2, decay of the curvature estimate s.", minimum=0, below=1,
      shapes=(VOGN,))
  vogn_prior: str = setting(
      "fixed", "VOGN's prior: fixed (Algorithm 1's N(0, 1/delta)) or empirical_bayes (each "
      "weight tensor's prior variance moved after every step towards mean(mu^2 + sigma^2) over "
      "the tensor, its closed-form optimum, at --vogn_prior_decay; VI learns the same scale by "
      "gradient).", choices=PRIORS, shapes=(VOGN,))
  vogn_prior_decay: float = setting(
      0.999, "VOGN with --vogn_prior=empirical_bayes: v <- decay v + (1 - decay) mean(mu^2 + "
      "sigma^2) per step. 0 jumps to the optimum at every step, which pins zero-initialised "
      "biases at zero (results/related/ablations/vogn_empirical_bayes/).", minimum=0, below=1,
      absent_means=0.0, shapes=(VOGN,), only_when=("vogn_prior", "empirical_bayes"))
  vogn_prior_precision: float = setting(
      1.0, "VOGN: delta, precision of the prior N(0, 1/delta) of every weight (with "
      "--vogn_prior=empirical_bayes, the initial one); refined_vogn refines against VOGN's final "
      "prior.", above=0, maximum=1e6, shapes=(VOGN,))
  vogn_tempering: float = setting(
      1.0, "VOGN: tau, the KL's weight in the objective (1: the ELBO; < 1: a colder posterior).",
      above=0, maximum=10.0, shapes=(VOGN,))
  vogn_damping: float = setting(0.0, "VOGN: gamma, external damping of the mean's step.",
                                minimum=0, maximum=1e6, shapes=(VOGN,))
  vogn_mc_samples: int = setting(1, "VOGN: weight draws per step.", minimum=1, maximum=64,
                                 shapes=(VOGN,))
  vogn_curvature: str = setting(
      "squared_gradients",
      "VOGN's curvature: squared_gradients (per-example squared gradients, Osawa et al.'s "
      "Algorithm 1) or gauss_newton (the generalised Gauss-Newton diagonal).", choices=CURVATURES,
      shapes=(VOGN,))
  vi_optimizer: str = setting(
      "adam", "VI's optimiser: adam (the paper's), momentum (SGD with --vi_momentum) or misso "
      "(incremental quadratic surrogates, baselines.misso; --learning_rate is its 1/(2 gamma)).",
      choices=VI_OPTIMIZERS, shapes=(VI, EXTRA_VI))
  vi_momentum: float = setting(0.9, "--vi_optimizer=momentum: the velocity's decay.", minimum=0,
                               below=1, shapes=(VI, EXTRA_VI))
  vi_weight_noise: str = setting(
      "per_example", "VI's weight noise: per_example (local reparameterisation, Flipout) or "
      "per_batch (one weight draw per step: Bayes by backprop's estimator).",
      choices=WEIGHT_NOISE, shapes=(VI, EXTRA_VI))
  num_particles: int = setting(20, "svgd, fsvgd: particles (networks) of the posterior.",
                               minimum=2, maximum=1000, shapes=(PARTICLES,))
  particle_learning_rate: float = setting(
      4e-3, "svgd, fsvgd: Adam's step size on -phi (the f-POVI paper's 0.004).", above=0,
      maximum=1.0, shapes=(PARTICLES,))
  particle_batch_size: int = setting(
      0, "svgd, fsvgd: minibatch (0: the f-POVI protocol's, 100, or 1000 on training sets of more "
      "than 900 examples).", minimum=0, shapes=(PARTICLES,))
  particle_epochs: int = setting(
      0, "svgd, fsvgd: epochs of ceil(N / batch) steps (0: the f-POVI protocol's, 500, or 3000 on "
      "training sets of more than 900 examples).", minimum=0, shapes=(PARTICLES,))
  particle_weight_prior_scale: float = setting(
      0.0, "svgd, fsvgd: std of the Gaussian prior on every weight and bias (0: the f-POVI "
      "paper's N(0, 1/fan_out)).", minimum=0, shapes=(PARTICLES,))
  particle_initializer: str = setting(
      "he_glorot", "svgd, fsvgd: initial weights, he_glorot (He-normal hidden layers, "
      "Glorot-uniform output, as the deep ensemble) or fpovi (the f-POVI authors' "
      "N(0, 1/(fan_in + fan_out + 1)) on every kernel); biases start at 0 either way. With "
      "--initial_noise_scale=0.5 the authors' whole initialisation.",
      choices=PARTICLE_INITIALIZERS, shapes=(PARTICLES,))
  fsvgd_prior_draws: int = setting(
      40, "fsvgd: prior networks drawn per step for the Gaussian function-space prior.",
      minimum=2, maximum=10_000, shapes=(PARTICLES,))
  fsvgd_prior_points: int = setting(
      4, "fsvgd: points of the function-space prior term per step, half from the batch and half "
      "from the extra batch.", minimum=1, maximum=1000, shapes=(PARTICLES,))
  fsvgd_extra_batch: int = setting(
      100, "fsvgd: perturbed training inputs added to each step's function-value points.",
      minimum=1, shapes=(PARTICLES,))
  fsvgd_kde_scale: float = setting(
      1.0, "fsvgd: the extra inputs' perturbation std is this / sqrt(N * input dims).", minimum=0,
      maximum=100.0, shapes=(PARTICLES,))
  vi_checkpoint_dir: Optional[str] = setting(
      None,
      "VI checkpoint directory, shared by the vi, refined_vi and vi_equal_compute runs of one "
      "dataset and seed so that the mean-field model is trained once (default: under "
      "--output_dir).",
      shapes=NOTHING)
  steps_per_checkpoint: int = setting(5_000,
                                      "Training steps between checkpoints (and progress lines).",
                                      minimum=1, shapes=NOTHING)

  def check(self) -> None:
    """Refinement's schedule must be one a float32 model can hold (before any training starts)."""
    super().check()
    if self.refit_deterministic and not self.has_deterministic_weights:
      raise UsageError("--refit_deterministic: this benchmark's mean-field networks have no "
                       "point-estimated weights to refit; allowed: --refit_deterministic=false")
    in_extra_batch = self.fsvgd_prior_points - self.fsvgd_prior_points // 2
    if self.method == "fsvgd" and self.fsvgd_extra_batch < in_extra_batch:
      raise UsageError(f"--fsvgd_extra_batch={self.fsvgd_extra_batch} cannot hold the "
                       f"{in_extra_batch} prior points of --fsvgd_prior_points="
                       f"{self.fsvgd_prior_points}; allowed: >= {in_extra_batch}")
    if self.method not in REFINED:
      return
    try:
      AuxiliarySchedule.geometric(self.variance_ratio, self.num_auxiliary).check_dtype("float32")
    except ValueError as error:
      raise UsageError(str(error)) from None

  def check_replicas(self, num_replicas: int) -> None:
    """The global batch (and so refinement, VI, MNF and every ensemble member's) must split."""
    super().check_replicas(num_replicas)
    if self.vi_optimizer == "misso" and self.method in VI_FAMILY and num_replicas > 1:
      raise UsageError(f"--vi_optimizer=misso keeps its surrogates on one device, but the "
                       f"strategy has {num_replicas} replicas; allowed: one device "
                       "(--num_cores=1)")
    if self.method in PARTICLE_METHODS and num_replicas > 1:
      raise UsageError(f"--method={self.method} couples every particle on one device, but the "
                       f"strategy has {num_replicas} replicas; allowed: one device "
                       "(--num_cores=1)")
    if self.batch_size % num_replicas:
      raise UsageError(f"--batch_size={self.batch_size} does not split evenly over "
                       f"{num_replicas} replicas; allowed: a multiple of {num_replicas}")

  # How long each trainer runs, given the training set's size. Here the step flags say it; a
  # benchmark may count in epochs instead (ResNet-20), so the methods ask these three.
  def num_steps(self, trainer: str, num_examples: int) -> int:
    """Adam steps of `trainer` (VI, MNF or ENSEMBLE) on `num_examples` training examples."""
    del num_examples
    return {VI: self.vi_steps, MNF: self.mnf_steps, ENSEMBLE: self.ensemble_steps}[trainer]

  def learning_rate_schedule(self, num_examples: int) -> LearningRateSchedule:
    """The Adam learning rate over the steps of VI, MNF and each ensemble member (constant)."""
    del num_examples
    return LearningRateSchedule(self.learning_rate)

  def checkpoint_interval(self, num_examples: int) -> int:
    """Training steps between checkpoints."""
    del num_examples
    return self.steps_per_checkpoint

  def particle_batch_and_steps(self, num_examples: int) -> tuple[int, int]:
    """(minibatch, steps) of svgd and fsvgd on `num_examples` training examples."""
    large = num_examples > PARTICLE_LARGE_TRAINING_SET
    batch, epochs = PARTICLE_LARGE_DATA if large else PARTICLE_SMALL_DATA
    batch = self.particle_batch_size or batch
    epochs = self.particle_epochs or epochs
    return batch, epochs * -(-num_examples // batch)

  def function_space_settings(self):
    """f-SVGD's settings (`baselines.particles.FunctionSpaceSettings`) from the flags."""
    from baselines.particles import FunctionSpaceSettings  # TensorFlow loads here
    return FunctionSpaceSettings(prior_draws=self.fsvgd_prior_draws,
                                 prior_points=self.fsvgd_prior_points,
                                 extra_batch=self.fsvgd_extra_batch,
                                 kde_scale=self.fsvgd_kde_scale)

  def vogn_settings(self) -> VognSettings:
    """VOGN's hyperparameters from the flags."""
    return VognSettings(momentum=self.vogn_momentum, curvature_decay=self.vogn_curvature_decay,
                        tempering=self.vogn_tempering, damping=self.vogn_damping,
                        mc_samples=self.vogn_mc_samples, curvature=self.vogn_curvature,
                        prior=self.vogn_prior, prior_decay=self.vogn_prior_decay)

  def mean_field_prior(self) -> tuple[float, bool]:
    """(initial prior scale, whether Adam learns it) of the mean-field networks: VOGN's
    N(0, 1/delta), which VOGN itself keeps or sets (--vogn_prior), else N(0, 1) learned by
    empirical Bayes if --empirical_bayes_prior."""
    if self.method in VOGN_FAMILY:
      return self.vogn_prior_precision ** -0.5, False
    return 1.0, self.empirical_bayes_prior

  @property
  def eval_samples(self) -> int:
    """Posterior draws the vi, vi_equal_compute and mnf predictives average."""
    return self.num_eval_samples or self.num_samples

  @property
  def extra_vi_steps(self) -> int:
    """vi_equal_compute's further VI steps: M * K * T unless set."""
    if self.equal_compute_steps >= 0:
      return self.equal_compute_steps
    return self.num_samples * self.num_auxiliary * self.steps_per_auxiliary
