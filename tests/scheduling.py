"""The README's `pytest -n 2 --dist loadfile` hands out the heaviest test files first.

xdist's loadfile scheduling queues the files by their number of tests, so a file of a few long
tests (the two-worker runs: minutes in 8 tests) can start last while the other worker has nothing
left to do. Handing out the longest files first (LPT, longest processing time first) leaves the
short files for the end, so that both workers finish within a few seconds of each other.

FILE_SECONDS are the heavy files' times in a quiet suite on 2 cores (the README's command with
`--durations=0`, summed per file; 2026-11-29); any other file counts SECONDS_PER_TEST per test.
Stale numbers cost only balance, never a result.
"""
from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

FILE_SECONDS = {
    "tests/test_uci_main.py": 286, "tests/test_image_main.py": 222,
    "tests/test_multi_worker.py": 209, "tests/test_distribution.py": 150,
    "tests/test_refine.py": 138, "tests/test_bandits.py": 131, "tests/test_resnet_main.py": 101,
    "tests/test_bandit_agents.py": 81, "tests/test_step_floor.py": 66, "tests/test_vogn.py": 66,
    "tests/test_bandit_replicas.py": 60, "tests/test_uci_run_time.py": 58,
    "tests/test_baselines.py": 56, "tests/test_lenet.py": 51, "tests/test_eight_schools.py": 51,
    "tests/test_bandit_speed.py": 42, "tests/test_non_gaussian_refinement.py": 41,
    "tests/test_loop_settings.py": 39, "tests/test_particles.py": 35,
    "tests/test_refinement_checkpoint.py": 34, "tests/test_resnet_networks.py": 28,
    "tests/test_graph_loops.py": 21, "tests/test_training_loop.py": 19,
    "tests/test_toy_multimodal.py": 19, "tests/test_table_commands.py": 16,
    "tests/test_layers.py": 16, "tests/test_misso.py": 15, "tests/test_numerics_fingerprint.py": 13,
}
SECONDS_PER_TEST = 0.2


def heaviest_first(files: dict[str, int]) -> list[str]:
  """`files` (path: number of tests) from the longest expected time to the shortest; ties keep
  their order."""
  def seconds(path: str) -> float:
    return FILE_SECONDS.get(path, SECONDS_PER_TEST * files[path])
  return sorted(files, key=seconds, reverse=True)


class HeaviestFilesFirst(LoadFileScheduling):
  """loadfile scheduling (a file's tests on one worker, its module fixtures made once) whose
  queue is in `heaviest_first` order."""

  _ordered = False

  def _assign_work_unit(self, node) -> None:
    # xdist 3.6 fills `workqueue` in `schedule` and assigns from its front at once: order it at
    # the first assignment.
    if not self._ordered:
      for path in heaviest_first({path: len(tests) for path, tests in self.workqueue.items()}):
        self.workqueue.move_to_end(path)
      self._ordered = True
    super()._assign_work_unit(node)
