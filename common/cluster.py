"""The processes of a --multi_worker run, read from $TF_CONFIG before TensorFlow starts.

Every worker of a MultiWorkerMirroredStrategy run runs the same command; $TF_CONFIG, in
TensorFlow's format, names the cluster's chief and workers and this process's task. A missing
or malformed one is refused in one line (a UsageError) before TensorFlow loads, naming what is
allowed.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

from common.config import UsageError

CLUSTER_VARIABLE = "TF_CONFIG"


@dataclasses.dataclass(frozen=True)
class Cluster:
  """The processes of a --multi_worker run and this one's place among them ($TF_CONFIG)."""
  chief: Optional[str]      # "host:port" of the chief, if the cluster names one
  workers: tuple[str, ...]  # "host:port" of every other process that trains
  task_type: str            # "chief" or "worker"
  task_index: int

  @property
  def size(self) -> int:
    return len(self.workers) + (self.chief is not None)

  @property
  def is_chief(self) -> bool:
    """Whether this process is the one that writes the run's files: the chief task, else
    worker 0 (as MultiWorkerMirroredStrategy decides)."""
    if self.chief is not None:
      return self.task_type == "chief"
    return self.task_type == "worker" and self.task_index == 0


def cluster_of_workers() -> Cluster:
  """$TF_CONFIG as a Cluster; UsageError (one line) if it is missing or malformed.

  The format is TensorFlow's: {"cluster": {"worker": ["host:port", ...], "chief": ["host:port"]},
  "task": {"type": "worker", "index": 0}} (a "chief" job is optional).
  """
  text = os.environ.get(CLUSTER_VARIABLE, "")
  allowed = ('allowed: JSON like {"cluster": {"worker": ["host:port", ...]}, "task": {"type": '
             '"worker", "index": 0}}')
  if not text.strip():
    raise UsageError(f"--multi_worker needs ${CLUSTER_VARIABLE} naming the workers; {allowed}")
  try:
    tf_config = json.loads(text)
  except json.JSONDecodeError as error:
    raise UsageError(f"${CLUSTER_VARIABLE} is not JSON ({error.msg}); {allowed}") from None
  cluster = tf_config.get("cluster") if isinstance(tf_config, dict) else None
  task = tf_config.get("task") if isinstance(tf_config, dict) else None
  if not isinstance(cluster, dict) or not isinstance(task, dict):
    raise UsageError(f"${CLUSTER_VARIABLE}={text!r} lacks a \"cluster\" or \"task\" object; "
                     f"{allowed}")
  jobs = {}
  for job in ("chief", "worker"):
    addresses = cluster.get(job, [])
    if not isinstance(addresses, list) or not all(
        isinstance(a, str) and a.rpartition(":")[2].isdigit() for a in addresses):
      raise UsageError(f"${CLUSTER_VARIABLE} cluster.{job}={addresses!r} is not a list of "
                       f"\"host:port\" strings; {allowed}")
    jobs[job] = addresses
  others = sorted(set(cluster) - {"chief", "worker"})
  if others or not jobs["worker"] or len(jobs["chief"]) > 1:
    raise UsageError(f"${CLUSTER_VARIABLE} cluster={cluster!r} must list workers (and at most "
                     f"one chief), nothing else (found {others or 'no workers'}); {allowed}")
  task_type, task_index = task.get("type"), task.get("index")
  if task_type not in ("chief", "worker") or not isinstance(task_index, int) or not (
      0 <= task_index < len(jobs[task_type] if task_type in jobs else [])):
    raise UsageError(f"${CLUSTER_VARIABLE} task={task!r} is not one of the cluster's tasks; "
                     f"allowed: type chief or worker, index 0 to its job's size - 1")
  return Cluster(jobs["chief"][0] if jobs["chief"] else None, tuple(jobs["worker"]), task_type,
                 task_index)
