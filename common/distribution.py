"""Which devices a run trains on: the hardware flags and the `tf.distribute` strategy they pick.

The flags are uncertainty-baselines', so our users' scripts carry over:
  (none)           one device, TensorFlow's default placement (a GPU if any);
  --use_gpu        MirroredStrategy over every visible GPU;
  --tpu=ADDRESS    TPUClusterResolver -> connect -> initialise -> TPUStrategy;
  --multi_worker   MultiWorkerMirroredStrategy over the machines $TF_CONFIG
                   names: every worker runs the same command, each on its GPUs
                   (--use_gpu) or its CPU; the chief writes the run's files;
  --num_cores=N    how many GPUs or TPU cores (with --multi_worker: replicas over
                   all workers) the run expects: a run that finds another number of
                   replicas stops, instead of silently training on other hardware
                   than the script says.
  --noise_chunk_steps, --jit_compile, --jit_compile_refinement, --jit_compile_ensemble:
                   how the training loops run on their device
                   (`methods.loop_settings.loop_settings_of` turns them into the
                   library's `LoopSettings`);
                   --xla_cache_dir keeps the compiled loops for later runs.
`--batch_size` stays the global batch; the `TrainingLoop` splits it evenly over
the replicas, so results do not depend on the replica count beyond round-off.
XLA compiles one device's loop: on several replicas a run asking for --jit_compile
runs the uncompiled loop and says so in one line (`replica_loop_settings`).

For tests only, REFINED_VI_TEST_CPU_DEVICES=N splits the CPU into N logical
devices before TensorFlow starts, and `--use_gpu` on a machine without GPUs
then mirrors over them: MirroredStrategy with N replicas on any laptop.

The config half of this module imports no TensorFlow, so bad flags are
refused before it loads.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, ClassVar, Optional, Sequence

from common.cluster import cluster_of_workers
from common.config import ALL, NOTHING, Config, UsageError, setting

TEST_CPU_DEVICES_VARIABLE = "REFINED_VI_TEST_CPU_DEVICES"


@dataclasses.dataclass
class DeviceConfig(Config):
  """The hardware flags every training binary takes (see the module docstring)."""

  # Whether the benchmark's models can compute in bfloat16 (a subclass's declaration).
  bfloat16_supported: ClassVar[bool] = False

  use_gpu: bool = setting(False, "Train data-parallel over every visible GPU (MirroredStrategy).",
                          shapes=NOTHING)
  tpu: Optional[str] = setting(
      None, "TPU to train on (a name or grpc:// address for TPUClusterResolver): TPUStrategy "
      "over its cores.", shapes=NOTHING)
  multi_worker: bool = setting(
      False, "Train data-parallel across the machines $TF_CONFIG names "
      "(MultiWorkerMirroredStrategy): every worker runs this same command; the chief writes the "
      "results and checkpoints.", shapes=NOTHING)
  num_cores: int = setting(1, "GPUs or TPU cores the run expects (with --multi_worker: replicas "
                           "over all workers); the run stops if the strategy finds another "
                           "number of replicas.", minimum=1, shapes=NOTHING)
  use_bfloat16: bool = setting(False, "Compute the network in bfloat16 where the benchmark "
                               "supports it (variables and the ELBO stay float32).", shapes=ALL)
  intra_op_threads: int = setting(
      0, "Threads each TensorFlow op may use (0: TensorFlow's choice, $TF_NUM_INTRAOP_THREADS or "
      "every core).", minimum=0,
      maximum=1024, shapes=NOTHING)

  jit_compile: bool = setting(
      False, "Compile each chunk of training steps with XLA (needs --noise_chunk_steps > 0; on "
      "several replicas the run uses the uncompiled loop and says so). Each training loop "
      "compiles once before its first chunk.",
      # Runs recorded before this setting existed ran uncompiled.
      shapes=NOTHING, round_off=True, absent_means=False)
  noise_chunk_steps: int = setting(
      0, "Draw the batch indices and weight noise of this many steps at once, ahead of them (0: "
      "each step draws its own inside it). Changes which numbers a run sees, not their "
      "distribution.", minimum=0, maximum=10_000, shapes=ALL,
      # Runs recorded before this setting existed drew inside each step.
      absent_means=0)
  jit_compile_refinement: bool = setting(
      True, "With --jit_compile: compile refinement's chunks too.", shapes=NOTHING,
      only_with="jit_compile", round_off=True,
      # Runs recorded before this setting existed compiled refinement with the rest.
      absent_means=True)
  jit_compile_ensemble: bool = setting(
      True, "With --jit_compile: compile the deep ensemble's chunks too (the same draws either "
      "way; the results differ by round-off grown over the steps).",
      shapes=NOTHING, only_with="jit_compile", round_off=True, absent_means=True)
  xla_cache_dir: Optional[str] = setting(
      None, "With --jit_compile: keep XLA's compiled chunks in this directory (made if missing) "
      "and load them in later runs with the same shapes (other seeds, methods, reruns) instead of "
      "compiling again.", shapes=NOTHING)

  def check(self) -> None:
    super().check()
    check_compiled_loop(self)
    if self.xla_cache_dir is not None and not self.jit_compile:
      raise UsageError(f"--xla_cache_dir={self.xla_cache_dir} keeps XLA's compiled chunks, but "
                       "nothing is compiled without --jit_compile; allowed: it with --jit_compile")
    if self.xla_cache_dir is not None and os.path.exists(self.xla_cache_dir) and not (
        os.path.isdir(self.xla_cache_dir)):
      raise UsageError(f"--xla_cache_dir={self.xla_cache_dir} is a file; allowed: a directory "
                       "(made if missing)")
    if self.use_gpu and self.tpu:
      raise UsageError(f"--use_gpu and --tpu={self.tpu} were both given; allowed: one of them")
    if self.multi_worker and self.tpu:
      raise UsageError(f"--multi_worker and --tpu={self.tpu} were both given; allowed: one of "
                       "them (TPUStrategy spans a pod's hosts itself)")
    if self.multi_worker:
      cluster_of_workers()   # refuses a missing or malformed $TF_CONFIG
    if self.multi_worker and getattr(self, "replace_mismatched", False):
      raise UsageError("--replace_mismatched with --multi_worker: the workers would restore what "
                       "the chief deletes; allowed: one of them (discard a mismatched checkpoint "
                       "in a one-machine run, or use another --output_dir)")
    if self.num_cores > 1 and not (self.use_gpu or self.tpu or self.multi_worker):
      raise UsageError(f"--num_cores={self.num_cores} needs --use_gpu, --tpu or --multi_worker; "
                       "without them the run uses one device (allowed: --num_cores=1)")
    if self.use_bfloat16 and not self.bfloat16_supported:
      raise UsageError(f"--use_bfloat16 is not supported by this benchmark ({type(self).__name__}; "
                       "bfloat16 is for the image models); allowed: --use_bfloat16=false")

  def check_replicas(self, num_replicas: int) -> None:
    """Raises UsageError if the run cannot use `num_replicas` replicas as flagged."""
    super().check_replicas(num_replicas)
    if num_replicas != self.num_cores:
      raise UsageError(
          f"--num_cores={self.num_cores} but the strategy found {num_replicas} replicas "
          f"({self.hardware_flag}); allowed: --num_cores={num_replicas}, or make the "
          f"{self.num_cores} devices visible")

  @property
  def hardware_flag(self) -> str:
    if self.tpu:
      return f"--tpu={self.tpu}"
    if self.multi_worker:
      return f"--multi_worker over {cluster_of_workers().size} processes"
    return "--use_gpu" if self.use_gpu else "no --use_gpu or --tpu: one device"


def writes_run_files() -> bool:
  """Whether this process writes the run's files (results, summaries, checkpoints, figures):
  always, unless it is a --multi_worker run's non-chief worker (under the strategy's scope),
  which writes its checkpoints to a temporary folder and nothing else."""
  if "tensorflow" not in sys.modules:
    return True
  import tensorflow as tf
  return bool(tf.distribute.get_strategy().extended.should_checkpoint)


def replica_loop_settings(config: Config, num_replicas: int) -> Config:
  """`config` for training on `num_replicas` replicas: with --jit_compile on several, the
  uncompiled loop (XLA compiles one device's loop; TPUStrategy compiles its steps itself), said
  in one info line, so that the results record the loop that ran."""
  if num_replicas == 1 or not getattr(config, "jit_compile", False):
    return config
  from absl import logging as absl_logging
  absl_logging.info("--jit_compile compiles one device's loop: on %d replicas the run uses the "
                    "uncompiled loop (--nojit_compile)", num_replicas)
  return dataclasses.replace(config, jit_compile=False)


def test_cpu_devices() -> int:
  """REFINED_VI_TEST_CPU_DEVICES as a count (0 when unset)."""
  value = os.environ.get(TEST_CPU_DEVICES_VARIABLE, "")
  if not value:
    return 0
  if not value.isdigit() or int(value) < 1:
    raise UsageError(f"{TEST_CPU_DEVICES_VARIABLE}={value} must be a positive integer")
  return int(value)


def split_cpu_for_tests() -> None:
  """Splits the CPU into REFINED_VI_TEST_CPU_DEVICES logical devices; before any TensorFlow op."""
  count = test_cpu_devices()
  if count:
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])


def check_compiled_loop(config: Config) -> None:
  """A config's --jit_compile needs its --noise_chunk_steps > 0 (UsageError otherwise)."""
  if config.jit_compile and not config.noise_chunk_steps:
    raise UsageError("--jit_compile needs the noise drawn ahead of the compiled steps; allowed: "
                     "--noise_chunk_steps > 0 (e.g. 100) with it, or --nojit_compile")


def use_xla_cache(directory: str) -> None:
  """Points XLA's persistent compilation cache at `directory` (--xla_cache_dir), keyed by each
  compiled computation and XLA's flags, so a stale entry is never loaded for another computation.
  TensorFlow reads the setting ($TF_XLA_FLAGS) when it starts: call this before importing it."""
  if "tensorflow" in sys.modules:
    raise RuntimeError("use_xla_cache must run before TensorFlow is imported, which reads "
                       "$TF_XLA_FLAGS once at start-up")
  os.makedirs(directory, exist_ok=True)
  flag = f"--tf_xla_persistent_cache_directory={os.path.abspath(directory)}"
  os.environ["TF_XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("TF_XLA_FLAGS"), flag]))


def set_thread_count(intra_op_threads: int) -> None:
  """Applies --intra_op_threads (0: leave TensorFlow's choice); before TensorFlow has initialised
  its devices (RuntimeError after)."""
  import tensorflow as tf
  if intra_op_threads:
    tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)


_multi_worker_strategies: list[Any] = []
_mirrored_strategies: dict[tuple[str, ...], Any] = {}
# How long the coordination service waits for a worker's heartbeat before it declares the worker
# dead and aborts every collective. TensorFlow's default, 10 s, is shorter than a busy machine can
# stall a process (a worker stopped for 18 s is declared dead under it); a worker that really
# died is still found within this time.
HEARTBEAT_TIMEOUT_SECONDS = 120


def multi_worker_strategy() -> Any:
  """The process's MultiWorkerMirroredStrategy over the workers $TF_CONFIG names, made on the first
  call, which must come before TensorFlow initialises its devices (it configures the collective
  ops then): `runner.tensorflow_startup.quiet_tensorflow_startup(multi_worker=True)`
  makes it. Its coordination service (the one TensorFlow would start: led by the chief, or
  worker 0 without one) allows HEARTBEAT_TIMEOUT_SECONDS between a worker's heartbeats."""
  if not _multi_worker_strategies:
    import tensorflow as tf
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context
    cluster = cluster_of_workers()
    jobs = [coordination_config_pb2.CoordinatedJob(name=name, num_tasks=count)
            for name, count in (("chief", int(cluster.chief is not None)),
                                ("worker", len(cluster.workers))) if count]
    leader = "chief" if cluster.chief is not None else "worker"
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=f"/job:{leader}/replica:0/task:0",
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=HEARTBEAT_TIMEOUT_SECONDS * 1000)
    _multi_worker_strategies.append(tf.distribute.MultiWorkerMirroredStrategy())
  return _multi_worker_strategies[0]


def mirrored_strategy(devices: Sequence[str]) -> Any:
  """The process's MirroredStrategy over `devices`, made on the first call for them and reused.

  Two MirroredStrategy objects over the same devices number their all-reduces alike (instance
  keys from 100), and TensorFlow's collective executor keeps the first one's shapes under each
  key: a script training two benchmarks on 2 replicas in one process failed on the second with
  "Shape mismatch in the collective instance 100". One strategy keeps counting instead. (A
  MirroredStrategy the caller makes itself still collides with ours.)
  """
  import tensorflow as tf
  key = tuple(devices)
  if key not in _mirrored_strategies:
    _mirrored_strategies[key] = tf.distribute.MirroredStrategy(list(devices))
  return _mirrored_strategies[key]


def strategy_for(config: DeviceConfig) -> Any:
  """The `tf.distribute.Strategy` the flags ask for; UsageError if the hardware disagrees."""
  import tensorflow as tf
  if config.multi_worker:
    strategy = multi_worker_strategy()
  elif config.tpu:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=config.tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
  elif config.use_gpu:
    devices = [device.name for device in tf.config.list_logical_devices("GPU")]
    if not devices and test_cpu_devices():
      devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    if not devices:
      raise UsageError(
          "--use_gpu but TensorFlow sees no GPU (CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); allowed: drop --use_gpu to train "
          "on the CPU")
    strategy = mirrored_strategy(devices)
  else:
    strategy = tf.distribute.get_strategy()
  config.check_replicas(strategy.num_replicas_in_sync)
  return strategy


def describe_strategy(strategy: Any) -> dict[str, Any]:
  """The strategy's kind, replica count and devices, as results.json records them."""
  import tensorflow as tf
  if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
    # The default strategy places ops on the first GPU if there is one.
    devices = [(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices())[0].name]
  else:
    devices = list(strategy.extended.worker_devices)
  description = {"strategy": type(strategy).__name__, "replicas": strategy.num_replicas_in_sync,
                 "devices": devices, "intra_op_threads": intra_op_threads_in_use()}
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    description["workers"] = cluster_of_workers().size   # devices: this worker's
  return description


def intra_op_threads_in_use() -> int:
  """Threads each op may use: the count the run set (its config's `thread_count()`), else
  $TF_NUM_INTRAOP_THREADS (which
  TensorFlow reads at start-up, and its getter does not report), else 0 (TensorFlow's choice:
  every core)."""
  import tensorflow as tf
  configured = tf.config.threading.get_intra_op_parallelism_threads()
  if configured:
    return configured
  from_environment = os.environ.get("TF_NUM_INTRAOP_THREADS", "").strip()
  return int(from_environment) if from_environment.isdigit() else 0
