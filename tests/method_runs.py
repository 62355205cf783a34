"""A benchmark's method runs, made once per test module and shared by its tests."""
import json
import pathlib
from typing import Callable

# Each refines, or trains further, the mean-field fit its base method leaves in the VI checkpoint
# folder they share, as run_table.sh runs them.
FITTED_BY = {"refined_vi": "vi", "vi_equal_compute": "vi", "refined_vogn": "vogn"}
SHARING_THE_FIT = ("vi", "vogn", *FITTED_BY)


class MethodRuns:
  """`runs(method)`: the metrics and results.json of one run of `method` with `settings` through
  `train_and_evaluate` (as a script calls it), made on first use. vi and vogn train from scratch
  into one VI checkpoint folder (`checkpoint_dir`); the methods of FITTED_BY run after their base
  method, from its fit there, so each fit is trained once."""

  def __init__(self, train_and_evaluate: Callable, config_class: type, root: pathlib.Path,
               **settings):
    self.train_and_evaluate, self.config_class = train_and_evaluate, config_class
    self.root, self.settings = root, settings
    self.checkpoint_dir = root / "vi_checkpoint"
    self._runs = {}

  def __call__(self, method: str) -> tuple[dict, dict]:
    if method not in self._runs:
      self._runs[method] = self.run(method, self.root / method)
    return self._runs[method]

  def run(self, method: str, output_dir: pathlib.Path, **changes) -> tuple[dict, dict]:
    """A run of `method` with `changes` to the settings, into `output_dir`, not kept: a method of
    FITTED_BY starts from its base method's fit (made first if need be)."""
    if method in FITTED_BY:
      self(FITTED_BY[method])
    shared = {"vi_checkpoint_dir": str(self.checkpoint_dir)} if method in SHARING_THE_FIT else {}
    config = self.config_class(method=method, **{**self.settings, **shared, **changes})
    metrics = self.train_and_evaluate(config, str(output_dir))
    return metrics, json.loads((output_dir / "results.json").read_text())
