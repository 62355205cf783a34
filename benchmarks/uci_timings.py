"""Wall time of every UCI method per dataset, from the committed runs' results.json files.

  python -m benchmarks.uci_timings --results_dir=results/uci \\
      --output_dir=results/benchmarks/uci_timings

Per dataset: mean VI / MNF / deep-ensemble training seconds, refinement seconds
(10 members, K = 5, T = 200, all members in one compiled loop), its ratio to
VI training (target < 10%) and the equal-compute extension; and the machine
time of the whole table (the sum of every run's wall time; VI training is
shared by the vi, refined_vi and vi_equal_compute runs and counted once).
"""
from __future__ import annotations

import os

from absl import flags

from runner import cli
from report.appendix import to_markdown
from common.results import atomic_output, write_results
from report.uci_table import load_runs, timings

flags.DEFINE_string("results_dir", "results/uci", "Where the UCI runs' results.json files are.")
flags.DEFINE_string("output_dir", "results/benchmarks/uci_timings",
                    "Where timings.md and results.json go.")


def main(argv):
  del argv
  runs = load_runs(flags.FLAGS.results_dir)
  per_dataset, totals = timings(runs)
  with atomic_output(os.path.join(flags.FLAGS.output_dir,
                                  "timings.md")) as path, open(path, "w") as handle:
    handle.write("# UCI wall times (seconds, mean over seeds)\n\n" +
                 to_markdown(per_dataset, digits=2) + "\n\n" +
                 "\n".join(f"- {name}: {value:,.3f}" for name, value in totals.items()) + "\n")
  write_results(flags.FLAGS.output_dir, benchmark="benchmarks", dataset="uci_timings", method="all",
                seed=0, flags={"results_dir": flags.FLAGS.results_dir}, metrics=totals,
                timings={"total_seconds": totals["total_machine_seconds"]})
  for name, value in totals.items():
    print(f"{name}: {value:,.3f}")


if __name__ == "__main__":
  cli.run(main)
