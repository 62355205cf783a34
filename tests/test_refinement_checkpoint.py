"""A refinement interrupted anywhere resumes from its checkpoint to the uninterrupted result."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling import progress
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.refine import Refiner
from auxiliary_sampling.schedule import AuxiliarySchedule
from methods.trainers.vi import train_mean_field

NUM_EXAMPLES, ELBO_BATCH = 32, 16   # whole-data estimates of 2 batches, stage estimates of 1
REFINE_ARGUMENTS = dict(schedule=AuxiliarySchedule.geometric(0.5, 2), steps_per_auxiliary=4,
                        elbo_batch_size=ELBO_BATCH, stage_elbo_aux=True, stage_elbo_examples=16,
                        seed=3)
# Every array of a RefinementResult: all must match bit for bit.
RESULT_ARRAYS = ("elbo_aux", "initial_elbo", "log_ratios", "trace", "stage_elbo_aux",
                 "stage_elbo_start", "expected_log_likelihood", "kl_aux")


class _Killed(Exception):
  """Stands for the process being killed right after a checkpoint was saved."""


def _model(num_members=None):
  """A two-layer mean-field classifier: weight noise in both layers, a nonlinearity between."""
  return tf_keras.Sequential([
      DenseReparameterization(8, activation="tanh", num_members=num_members),
      DenseReparameterization(3, num_members=num_members)])


def _log_likelihood(labels, logits):
  return -tf.nn.sparse_softmax_cross_entropy_with_logits(
      tf.broadcast_to(labels, tf.shape(logits)[:-1]), logits)


@pytest.fixture(scope="module")
def trained():
  """A briefly trained model on three Gaussian blobs, and two refiners (as two processes)."""
  tf.random.set_seed(0)
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 3, NUM_EXAMPLES)
  inputs = (rng.normal(size=[NUM_EXAMPLES, 2]) + 2.0 * np.eye(3, 2)[labels]).astype(np.float32)
  model = _model()
  train_mean_field(model, inputs, labels, _log_likelihood, num_steps=200, learning_rate=1e-2,
                   batch_size=16)

  def refiner():
    return Refiner(_model, inputs, labels, _log_likelihood, num_samples=3, batch_size=8)
  return dict(model=model, first=refiner(), second=refiner())


def _refine(refiner, model, directory, after_checkpoint=None):
  return refiner.refine(model, checkpoint_dir=str(directory), checkpoint_seconds=1e-9,
                        after_checkpoint=after_checkpoint, **REFINE_ARGUMENTS)


def _snapshot(result):
  arrays = {name: np.array(getattr(result, name)) for name in RESULT_ARRAYS}
  arrays["members"] = [variable.numpy() for variable in result.model.variables]
  return arrays


def test_a_refinement_killed_at_any_checkpoint_resumes_to_the_uninterrupted_result(
    trained, tmp_path, monkeypatch):
  """Kills a refinement after each of its saves in turn (inside the members' ELBO estimate
  before refinement, after it, after the stage subset's estimate, after each auxiliary variable,
  inside and after the final estimate) and resumes it in another refiner: every array of the
  result and every variable of the refined members equal the uninterrupted run's bit for bit.

  Bugs it catches (each planted once, each failed here): the variables not restored (the
  members restart from the trained model), an estimate restarted from batch 0 on streams that
  stand mid-estimate, the cumulative log ratio not saved, the saved partial sum ignored.
  """
  monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)   # estimates in pieces of one batch
  labels = []
  expected = _snapshot(_refine(trained["first"], trained["model"], tmp_path / "whole",
                               labels.append))
  assert labels == [
      "ELBO estimate of the members before refinement, batch 1",
      "the members' ELBO estimate before refinement",
      "the stage subset's ELBO estimate before refinement",
      "auxiliary variable 1/2", "auxiliary variable 2/2",
      "ELBO estimate of the refined members, batch 1",
      "the refined members' ELBO estimate"]
  for killed_after, label in enumerate(labels, 1):
    directory = tmp_path / f"killed_{killed_after}"
    saves = []

    def kill(saved, killed_after=killed_after, saves=saves):
      saves.append(saved)
      if len(saves) == killed_after:
        raise _Killed()
    with pytest.raises(_Killed):
      _refine(trained["first"], trained["model"], directory, kill)
    resumed = _refine(trained["second"], trained["model"], directory)
    assert resumed.resumed_from == label
    got = _snapshot(resumed)
    for name in RESULT_ARRAYS:
      np.testing.assert_array_equal(got[name], expected[name],
                                    err_msg=f"{name}, killed after {label!r}")
    for got_variable, expected_variable in zip(got["members"], expected["members"]):
      np.testing.assert_array_equal(got_variable, expected_variable,
                                    err_msg=f"members, killed after {label!r}")
  assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-7.data-00000-of-00001",
                                           "ckpt-7.index", "refinement_progress-7.npz"]


def test_a_checkpoint_of_other_arguments_or_another_trained_model_is_refused(trained, tmp_path):
  """The bug: a rerun with another seed (or after VI was retrained) resumed the old refinement
  and reported it as the new one. The refusal names what differs."""
  directory = tmp_path / "refinement"
  arguments = dict(REFINE_ARGUMENTS, stage_elbo_aux=False, steps_per_auxiliary=1)
  trained["first"].refine(trained["model"], checkpoint_dir=str(directory), **arguments)
  with pytest.raises(ValueError, match=r"other arguments \(seed: 3 there, 4 now\)"):
    trained["first"].refine(trained["model"], checkpoint_dir=str(directory),
                            **dict(arguments, seed=4))
  other = _model()
  other(np.zeros([1, 2], np.float32))
  for target, source in zip(other.variables, trained["model"].variables):
    target.assign(source)
  other.variables[0].assign_add(tf.ones_like(other.variables[0]) * 1e-3)
  with pytest.raises(ValueError, match="trained_model: '[0-9a-f]+' there"):
    trained["first"].refine(other, checkpoint_dir=str(directory), **arguments)
  progress_file = [name for name in os.listdir(directory) if name.endswith(".npz")][0]
  with np.load(directory / progress_file) as saved:
    assert json.loads(str(saved["arguments"]))["seed"] == 3   # the refusal changed nothing


def test_a_killed_refined_vi_run_resumes_its_refinement_and_reports_the_uninterrupted_numbers(
    tmp_path, data_dir_for, monkeypatch):
  """Through the UCI benchmark's `train_and_evaluate` (as the binaries run it): a run killed
  after its refinement's first auxiliary variable, run again, resumes there (not from VI's end)
  and writes the uninterrupted run's metrics; a rerun with another refinement setting is refused
  before VI trains.

  Bugs it catches: the runner not passing a checkpoint directory (nothing resumes, the hours
  of refinement are lost), or claiming it with VI's settings only (a refinement of other K
  resumed as this one)."""
  from auxiliary_sampling import refinement_checkpoint
  from common.config import UsageError
  from uci import main as uci_main
  from uci.config import UciConfig
  tiny = dict(method="refined_vi", dataset="yacht_hydrodynamics", download=False,
              data_dir=data_dir_for("yacht_hydrodynamics"), hidden_units=8, vi_steps=60,
              num_samples=2, num_auxiliary=2, steps_per_auxiliary=5, noise_chunk_steps=0,
              jit_compile=False, prepare_refinement=False,
              vi_checkpoint_dir=str(tmp_path / "vi"))
  volatile = ("vi_resumed_from_step", "refinement_resumed_from")

  def steady(metrics):
    return {name: value for name, value in metrics.items() if name not in volatile}
  whole = uci_main.train_and_evaluate(UciConfig(**tiny), str(tmp_path / "whole"))
  assert whole["refinement_resumed_from"] is None

  save = refinement_checkpoint.RefinementCheckpoint.save

  def save_then_die(self, progress, label):
    save(self, progress, label)
    if label == "auxiliary variable 1/2":
      raise _Killed()
  with monkeypatch.context() as patched:
    patched.setattr(refinement_checkpoint.RefinementCheckpoint, "save", save_then_die)
    with pytest.raises(_Killed):
      uci_main.train_and_evaluate(UciConfig(**tiny), str(tmp_path / "killed"))
  with pytest.raises(UsageError, match="--num_auxiliary=3 "):
    uci_main.train_and_evaluate(UciConfig(**dict(tiny, num_auxiliary=3)),
                                str(tmp_path / "killed"))
  resumed = uci_main.train_and_evaluate(UciConfig(**tiny), str(tmp_path / "killed"))
  assert resumed["refinement_resumed_from"] == "auxiliary variable 1/2"
  assert steady(resumed) == steady(whole)
