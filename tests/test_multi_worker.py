"""One run across machines: --multi_worker trains as one device does, on two worker processes;
and several replicas run the default flags (UCI's compiled loop) without a usage error, training
as one device does.

Each run starts two processes of a binary on localhost (loopback only), joined by $TF_CONFIG into
a MultiWorkerMirroredStrategy of 2 replicas, one CPU each, both writing to one --output_dir as
workers on a shared filesystem would; every process is bounded in time. What is covered where
(not every method on every benchmark, to keep the suite fast):
  uci.main     refined VI with VI stopped at its first checkpoint and resumed on the two workers
               (with UCI's default compiled loop, which several replicas run uncompiled),
               against one uninterrupted device (the VI family and refinement, the save and
               restore the workers make together); refined VI with the default compiled loop on
               2 logical CPUs against that same device; a bad $TF_CONFIG;
  image.main   the deep ensemble (LeNet-5s on a member axis) against one device;
  resnet.main  VI of ResNet-8 (ResNet-20's kinds of layers, one block per stack) with batch norm
               (the statistics all-reduced over the workers, the moving averages read across
               them in checkpoints and evaluation) and augmented batches, on two workers
               against one device. Its run on 2 replicas of one process
               would give the two workers' numbers bit for bit (below); MirroredStrategy's own
               share of it is checked in test_distribution: batch norm and augmentation in the
               library (`batch_norm`, `augmentation`), --use_gpu's strategy in the image runner
               (the LeNet-5 bfloat16 run);
  the library  a `TrainingLoop` whose workers' clocks disagree, reporting progress inside a chunk;
               a worker paused longer than TensorFlow's default heartbeat timeout.

Two workers give exactly the numbers of two replicas in one process (MirroredStrategy over 2
logical CPUs; measured bit for bit on LeNet-5 VI and ResNet-20 VI with batch norm); what differs
from one device is the order of float32 sums, which training amplifies (see
`test_two_workers_train_as_one_device` for the tolerances and their measurements).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from tests.usage_runs import run_commands

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_SECONDS = 600
# Each binary's tiny settings and the dataset its --data_dir must hold.
TINY = {
    "uci": (["--dataset=boston_housing", "--nodownload", "--hidden_units=8",
             "--steps_per_checkpoint=100", "--num_samples=3", "--num_auxiliary=2",
             "--steps_per_auxiliary=10", "--elbo_num_samples=2", "--mnf_steps=6"],
            "boston_housing"),
    "image": (["--dataset=mnist", "--nodownload", "--num_train_examples=256",
               "--num_test_examples=100", "--batch_size=64", "--ensemble_members=2",
               "--ensemble_steps=20", "--steps_per_checkpoint=100"], "mnist"),
    # 2 Adam steps of 32 augmented images (the learning rate steps down after the first) on
    # ResNet-8, which traces in half ResNet-20's time; VI predicts with one weight draw, as the
    # authors scored it.
    "resnet": (["--dataset=fashion_mnist", "--nodownload", "--num_train_examples=64",
                "--num_test_examples=32", "--batch_size=32", "--epochs=1", "--decay_epochs=0.5",
                "--decay_factors=0.1", "--num_eval_samples=1", "--batchnorm",
                "--data_augmentation", "--depth=8"], "fashion_mnist"),
}


@pytest.fixture(scope="module")
def tiny(data_dir_for):
  """tiny(binary): ["-m", "<binary>.main", its tiny flags], reading its data (or the test
  skips)."""
  def command(binary: str) -> list[str]:
    flags, dataset = TINY[binary]
    return ["-m", f"{binary}.main", *flags, f"--data_dir={data_dir_for(dataset)}"]
  return command


@pytest.fixture(scope="module")
def one_device(tmp_path_factory, tiny):
  """one_device(binary, method, *flags): results.json of the binary's tiny run of `method` (with
  `flags` added) on one device (uncompiled), made on first use and shared by the tests that
  compare with it."""
  root, runs = tmp_path_factory.mktemp("one_device"), {}

  def results(binary: str, method: str, *flags: str) -> dict:
    if (binary, method, flags) not in runs:
      output = root / f"{binary}_{method}_{len(runs)}"
      completed = _one_device(tiny(binary), f"--output_dir={output}", f"--method={method}",
                              *flags, "--nojit_compile")
      assert completed.returncode == 0, completed.stderr[-2000:]
      runs[binary, method, flags] = _results(output)
    return runs[binary, method, flags]
  return results


def _free_ports(count: int) -> list[int]:
  sockets = [socket.socket() for _ in range(count)]
  for each in sockets:
    each.bind(("localhost", 0))
  ports = [each.getsockname()[1] for each in sockets]
  for each in sockets:
    each.close()
  return ports


def _environment(tf_config=None) -> dict:
  environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1",
                 "TF_NUM_INTRAOP_THREADS": "1"}
  environment.pop("REFINED_VI_TEST_CPU_DEVICES", None)
  environment.pop("TF_CONFIG", None)
  if tf_config is not None:
    environment["TF_CONFIG"] = json.dumps(tf_config)
  return environment


def _one_device(command: list[str], *flags) -> subprocess.CompletedProcess:
  """`python <command> <flags>` on one device (`command`: ["-m", module, its flags...])."""
  return subprocess.run([sys.executable, *command, *flags], cwd=REPO, capture_output=True,
                        text=True, timeout=TIMEOUT_SECONDS, env=_environment())


def _two_workers(command: list[str], *flags, timeout: float = TIMEOUT_SECONDS
                 ) -> list[subprocess.CompletedProcess]:
  """`python <command> <flags> --multi_worker --num_cores=2` on two worker processes (worker 0
  is the chief); a `command` of ["-c", code] runs `code` with $TF_CONFIG set alone. Both are
  killed after `timeout` seconds (subprocess.TimeoutExpired). Their output goes to files, not
  pipes: a worker whose unread pipe filled would block, and the other with it in a collective."""
  workers = [f"localhost:{port}" for port in _free_ports(2)]
  argv = [sys.executable, *command, *flags]
  if command[0] == "-m":
    argv += ["--multi_worker", "--num_cores=2"]
  outputs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in range(2)]
  processes = [subprocess.Popen(
      argv, cwd=REPO, stdout=stdout, stderr=stderr, text=True,
      env=_environment({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}))
      for i, (stdout, stderr) in enumerate(outputs)]
  completed, deadline = [], time.monotonic() + timeout
  try:
    for process, files in zip(processes, outputs):
      process.wait(timeout=max(deadline - time.monotonic(), 0.0))
      texts = []
      for file in files:
        file.seek(0)
        texts.append(file.read())
      completed.append(subprocess.CompletedProcess(process.args, process.returncode, *texts))
  finally:
    for process in processes:   # SIGKILL: a worker blocked in a collective ignores SIGTERM
      process.kill()
    for file in (file for files in outputs for file in files):
      file.close()
  return completed


def _check_succeeded(workers: list[subprocess.CompletedProcess]) -> None:
  """Every worker exited 0; else fails showing each worker's exit code and last stderr lines
  (a worker that died shows its own error, not only the other's "stopped sending heartbeats")."""
  if any(worker.returncode != 0 for worker in workers):
    pytest.fail("\n".join(f"worker {i} exited {worker.returncode}:\n{worker.stderr[-2500:]}"
                          for i, worker in enumerate(workers)))


def _results(directory) -> dict:
  return json.loads((directory / "results.json").read_text())


def _check_like_one_device(recorded: dict, reference: dict, rtol: float = 1e-5) -> None:
  assert recorded["machine"]["replicas"] == 2 and recorded["machine"]["workers"] == 2
  assert recorded["flags"]["multi_worker"] and not recorded["flags"]["jit_compile"]
  compared = [metric for metric in ("test_mll", "test_rmse", "elbo",
                                    "elbo_expected_log_likelihood", "elbo_aux")
              if metric in reference["metrics"]]
  assert "test_mll" in compared
  for metric in compared:
    np.testing.assert_allclose(recorded["metrics"][metric], reference["metrics"][metric],
                               rtol=rtol, err_msg=metric)


@pytest.mark.parametrize("binary,method,rtol", [
    ("image", "deep_ensemble", 1e-5), ("resnet", "vi", 1e-4)])
def test_two_workers_train_as_one_device(tmp_path, tiny, one_device, binary, method, rtol):
  """Two worker processes end to end: one device's metrics (uncompiled on both).

  Catches: workers that each train on the whole batch (planted in the non-chief worker only:
  test MLL 0.15 off on the image ensemble, 0.023 on ResNet-20, 0.014 on ResNet-8; all fail), a
  strategy that is not joined across the processes (each worker trains alone: the runs record 1
  replica), the non-chief worker's scratch checkpoints left behind, and the ResNet's replicas
  augmenting their images alike (planted: each replica drawing its own rows' transforms as if it
  held the whole batch; fails on ResNet-20).

  Tolerances. Two workers give the numbers of MirroredStrategy's 2 replicas in one process bit
  for bit (measured on LeNet-5 VI after 150 steps and ResNet-20 VI with batch norm after 4); one
  device adds the float32 sums in another order, and training amplifies that: Adam moves a
  weight by about its learning rate whatever its gradient's size, so a gradient near zero whose
  sign round-off flips moves it by 2e-3 at once. On LeNet-5 VI (1,024 digits, batch 64) one
  device's and 2 replicas' weights agree to 6e-7 for 50 steps, then part, to 2e-2 at step 150
  (test MLL 6e-3 apart): as far as one device's from a start one float32 ulp away (3e-2). So
  these runs are short. Measured test MLL differences: the image ensemble 3e-8,
  ResNet-20 7e-6, ResNet-8 5e-6 (ResNet-20's ELBO's expected log-likelihood 1.2e-5; batch
  norm's all-reduced E[x^2] - E[x]^2, where one device computes E[(x - mean)^2], adds to it);
  hence 1e-5, and for the ResNet 1e-4.
  """
  workers = _two_workers(tiny(binary), f"--output_dir={tmp_path / 'two'}", f"--method={method}")
  _check_succeeded(workers)
  _check_like_one_device(_results(tmp_path / "two"), one_device(binary, method), rtol)
  scratch = [path for path in tmp_path.rglob("*") if "worker_checkpoint" in path.name]
  assert not scratch, scratch


# One device's uninterrupted refined VI (200 VI steps): the reference of the resumed two workers
# and of the default loop on 2 replicas.
WHOLE_REFINED_VI = ("uci", "refined_vi", "--vi_steps=200")


def test_refined_vi_resumed_on_two_workers_ends_as_one_uninterrupted_device(tmp_path, tiny,
                                                                            one_device):
  """VI stopped after 100 of 200 steps on the two workers, then refined VI from that checkpoint
  on the two workers, ends where one device's uninterrupted refined VI run ends. Catches: a
  worker that restores nothing (the other worker does not read the chief's checkpoint) or its own
  scratch copy, the Adam state or data stream lost in the save the workers make together,
  refinement that differs across the workers, and UCI's default --jit_compile refused on several
  replicas instead of running the uncompiled loop."""
  uci = tiny("uci")
  checkpoints = f"--vi_checkpoint_dir={tmp_path / 'checkpoints'}"
  first = _two_workers(uci, f"--output_dir={tmp_path / 'first'}", "--method=vi",
                       "--vi_steps=100", checkpoints)
  _check_succeeded(first)
  resumed = _two_workers(uci, f"--output_dir={tmp_path / 'resumed'}", "--method=refined_vi",
                         "--vi_steps=200", checkpoints)
  _check_succeeded(resumed)
  assert "uses the uncompiled loop" in resumed[0].stderr
  recorded = _results(tmp_path / "resumed")
  assert recorded["metrics"]["vi_resumed_from_step"] == 100
  _check_like_one_device(recorded, one_device(*WHOLE_REFINED_VI))


def _piece_lengths_worker() -> None:
  """Runs in each of two worker processes ($TF_CONFIG): 40 steps of a small VI loop reporting its
  progress every second, worker i's clock running 1000^i times as fast as the real one, so that
  each worker would size its pieces differently; prints the compiled calls' lengths and the
  trace as JSON."""
  import tensorflow as tf
  strategy = tf.distribute.MultiWorkerMirroredStrategy()   # before TensorFlow's first op
  from auxiliary_sampling import training_loop
  from auxiliary_sampling.loop_settings import LoopSettings
  from tests.test_loop_settings import _loop
  index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  real_time = training_loop.time

  class FastClock:
    """Worker i's clock: 1000^i times as fast as the real one."""
    @staticmethod
    def perf_counter() -> float:
      return real_time.perf_counter() * 1000**index
  training_loop.time = FastClock()
  with strategy.scope():
    loop = _loop(LoopSettings())
  calls, real_run = [], loop.run

  def counted_run(num_steps, *arguments):
    calls.append(int(num_steps))
    return real_run(num_steps, *arguments)
  loop.run = counted_run
  trace = loop.maximize(40, 1e-2, progress=lambda done, trace: None, progress_seconds=1.0)
  print(json.dumps({"calls": calls, "trace": trace.tolist()}))


def test_workers_whose_clocks_disagree_make_the_same_calls_and_train_as_one_device():
  """A loop reporting progress cuts its steps into compiled calls sized from each worker's own
  clock; the workers' collectives pair up only if every worker makes the same calls. Catches
  pieces sized per worker: the two workers deadlock (planted: `_agreed_piece_length` returning
  its argument; both workers hung until killed, as LeNet-5's did at its first progress report
  in a minute's chunk)."""
  workers = _two_workers(["-c", "from tests.test_multi_worker import _piece_lengths_worker as w; "
                          "w()"], timeout=240)
  _check_succeeded(workers)
  recorded = [json.loads(worker.stdout.strip().splitlines()[-1]) for worker in workers]
  assert recorded[0]["calls"] == recorded[1]["calls"] and sum(recorded[0]["calls"]) == 40
  assert recorded[0]["trace"] == recorded[1]["trace"]
  from auxiliary_sampling.loop_settings import LoopSettings
  from tests.test_loop_settings import _loop
  np.testing.assert_allclose(recorded[0]["trace"], _loop(LoopSettings()).maximize(40, 1e-2),
                             rtol=1e-5)


ROUNDS = 8


def _pausable_worker() -> None:
  """Runs in each of two worker processes ($TF_CONFIG): the binaries' MultiWorkerMirroredStrategy,
  then ROUNDS all-reduces of 1 a quarter second apart, printing each round's sum as it ends."""
  import tensorflow as tf
  from common.distribution import multi_worker_strategy
  strategy = multi_worker_strategy()
  for round_index in range(ROUNDS):
    total = strategy.reduce(tf.distribute.ReduceOp.SUM,
                            strategy.run(lambda: tf.constant(1.0)), axis=None)
    print(round_index, float(total), flush=True)
    time.sleep(0.25)


def test_a_worker_paused_longer_than_tensorflows_heartbeat_timeout_is_not_declared_dead(
    tmp_path):
  """A worker whose threads all stop for 18 s (SIGSTOP, as a loaded machine can starve a process)
  and then go on: both workers finish, every all-reduce summing both. Catches the coordination
  service left at TensorFlow's 10 s heartbeat timeout (planted: `multi_worker_strategy` without
  its own configuration; the other worker aborts with "stopped sending heartbeats", the error a
  2-worker ResNet-20 run hit in CI)."""
  workers = [f"localhost:{port}" for port in _free_ports(2)]
  logs = [tmp_path / f"worker_{i}.{kind}" for i in range(2) for kind in ("out", "err")]
  files = [open(log, "w") for log in logs]
  processes = [subprocess.Popen(
      [sys.executable, "-c", "from tests.test_multi_worker import _pausable_worker as w; w()"],
      cwd=REPO, stdout=files[2 * i], stderr=files[2 * i + 1], text=True,
      env=_environment({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}))
      for i in range(2)]
  try:
    deadline = time.monotonic() + 240
    while logs[2].read_text().count("\n") < 2:   # worker 1 has made two rounds
      assert time.monotonic() < deadline and processes[1].poll() is None, logs[3].read_text()
      time.sleep(0.1)
    os.kill(processes[1].pid, signal.SIGSTOP)
    time.sleep(18)
    os.kill(processes[1].pid, signal.SIGCONT)
    for process in processes:
      process.wait(timeout=max(deadline - time.monotonic(), 0.0))
  finally:
    for process in processes:
      process.kill()
    for file in files:
      file.close()
  completed = [subprocess.CompletedProcess(process.args, process.returncode,
                                           logs[2 * i].read_text(), logs[2 * i + 1].read_text())
               for i, process in enumerate(processes)]
  _check_succeeded(completed)
  for worker in completed:
    assert worker.stdout.split() == [word for i in range(ROUNDS) for word in (str(i), "2.0")]


def test_the_default_compiled_loop_on_two_replicas_runs_uncompiled_and_says_so(tmp_path, tiny,
                                                                              one_device):
  """UCI compiles its loop by default; `--use_gpu --num_cores=2` with the default loop flags
  (here on 2 logical CPUs: refined VI, whose 200 VI steps and refinement draw their noise ahead
  in chunks) runs the uncompiled loop with one info line, records that, and trains as one
  uncompiled device (the resumed test's reference run). Catches the usage error this used to
  be, a run recording --jit_compile while it ran uncompiled, and replicas that cut a chunk's
  draws to the wrong rows (planted: every replica keeping the first rows of a chunk's
  per-example draws: test RMSE 6e-5 off, 6 times the tolerance; fails). MirroredStrategy over 2
  devices, as test_distribution's UCI runs."""
  two = subprocess.run(
      [sys.executable, *tiny("uci"), "--method=refined_vi", "--vi_steps=200",
       f"--output_dir={tmp_path}", "--use_gpu", "--num_cores=2"],
      cwd=REPO, capture_output=True, text=True,
      timeout=TIMEOUT_SECONDS, env={**_environment(), "REFINED_VI_TEST_CPU_DEVICES": "2"})
  assert two.returncode == 0, two.stderr[-2000:]
  assert "on 2 replicas the run uses the uncompiled loop" in two.stderr
  recorded = _results(tmp_path)
  assert recorded["machine"]["replicas"] == 2 and not recorded["flags"]["jit_compile"]
  assert recorded["machine"]["strategy"] == "MirroredStrategy"
  reference = one_device(*WHOLE_REFINED_VI)
  assert reference["machine"]["replicas"] == 1
  for metric in ("test_mll", "test_rmse", "elbo", "elbo_aux"):
    np.testing.assert_allclose(recorded["metrics"][metric], reference["metrics"][metric],
                               rtol=1e-5, err_msg=metric)


BAD_CLUSTERS = [
    (None, "--multi_worker needs $TF_CONFIG naming the workers"),
    ("{not json", "$TF_CONFIG is not JSON"),
    ('{"cluster": {"worker": ["localhost:1"]}}', 'lacks a "cluster" or "task" object'),
    ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}',
     'is not a list of "host:port" strings'),
    ('{"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]}, '
     '"task": {"type": "worker", "index": 0}}', "must list workers (and at most one chief)"),
    ('{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 1}}',
     "is not one of the cluster's tasks"),
]


@pytest.fixture(scope="module")
def bad_cluster_runs(tmp_path_factory):
  """`uci.main --multi_worker` under each $TF_CONFIG of BAD_CLUSTERS, made together: for each,
  its output folder and completed run."""
  root = tmp_path_factory.mktemp("bad_clusters")
  outputs = [root / str(index) / "out" for index in range(len(BAD_CLUSTERS))]
  completed = run_commands(
      "uci.main", [[f"--output_dir={output}", "--multi_worker"] for output in outputs],
      environment={"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1",
                   "TF_NUM_INTRAOP_THREADS": "1", "REFINED_VI_TEST_CPU_DEVICES": None},
      environments=[{"TF_CONFIG": tf_config} for tf_config, _ in BAD_CLUSTERS])
  return {tf_config: run for (tf_config, _), run in zip(BAD_CLUSTERS, zip(outputs, completed))}


@pytest.mark.parametrize("tf_config,message", BAD_CLUSTERS)
def test_a_bad_cluster_is_one_usage_line(bad_cluster_runs, tf_config, message):
  output, completed = bad_cluster_runs[tf_config]
  assert completed.returncode == 2, completed.stderr[-2000:]
  assert message in completed.stderr
  assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
  assert not output.exists()


def test_multi_worker_refuses_flags_it_cannot_honour():
  from uci.config import UciConfig
  from common.config import UsageError
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1"]},
                                          "task": {"type": "worker", "index": 0}}))
    with pytest.raises(UsageError, match="--multi_worker and --tpu=t were both given"):
      UciConfig(multi_worker=True, tpu="t").check()
    with pytest.raises(UsageError, match="the workers would restore what the chief deletes"):
      UciConfig(multi_worker=True, replace_mismatched=True).check()
    UciConfig(multi_worker=True, num_cores=2).check()   # replicas over all workers
