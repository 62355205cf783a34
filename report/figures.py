"""The report's figures: each paper figure we have, linked beside a caption in our words.

A figure is linked only when its PNG exists next to a counted results.json (see
results_loader); its caption's numbers come from that results.json, so they cannot drift from
the picture. A figure with no run is one "not run yet" line.
"""
from __future__ import annotations

import csv
import os
from typing import Optional

from report import results_loader
from report.image_table import DATASETS as IMAGE_DATASETS
from report.paper_differences import readme_link
from report.table_text import minus_sign


def _number(value: float, spec: str = ".3f") -> str:
  return minus_sign(format(value, spec))


def _run_time(run: results_loader.LoadedRun) -> str:
  """" Run time 36 min." from the run's timings.total_seconds ("" if it has none)."""
  seconds = run.payload.get("timings", {}).get("total_seconds")
  if seconds is None:
    return ""
  return f" Run time {seconds:.0f} s." if seconds < 90 else f" Run time {seconds / 60:,.0f} min."


def _count(value) -> str:
  return f"{value:,}" if isinstance(value, int) else str(value)


def _image(path: str, output_dir: str, alt: str) -> Optional[str]:
  if not os.path.exists(path):
    return None
  return f"![{alt}]({os.path.relpath(path, output_dir)})"


def _run(results_dir: str, benchmark: str, dataset: str) -> Optional[results_loader.LoadedRun]:
  runs = [r for r in results_loader.load_runs(results_dir, benchmark)
          if r.payload.get("dataset") == dataset]
  return runs[0] if runs else None


def _by_k(values: dict) -> list[float]:
  return [values[k] for k in sorted(values, key=int)]


def figure2(results_dir: str, output_dir: str) -> str:
  """The multi-modal toy example."""
  title = "## Figure 2: a multi-modal posterior from a Gaussian start (toy example)\n\n"
  run = _run(results_dir, "toy", "multimodal")
  image = run and _image(os.path.join(os.path.dirname(run.path), "figure.png"), output_dir,
                         "Figure 2")
  if not image:
    return title + "Not run yet.\n"
  metrics = run.payload["metrics"]
  masses = "/".join(f"{m:.2f}" for m in metrics["refined_mass_per_mode"])
  true = "/".join(f"{m:.2f}" for m in metrics["true_mass_per_mode"])
  caption = " ".join([
      "One weight w with a four-mode posterior (our likelihood: a Gaussian envelope with ripples;",
      "the paper does not give its own). (a) The true posterior. (b) The best Gaussian, ELBO",
      f"{_number(metrics['elbo'])}. (c) The conditional posteriors q₁(w) fitted after six draws",
      f"of a₁. (d) {_count(run.payload['flags'].get('num_samples'))} refined samples: ELBO_aux",
      f"{_number(metrics['elbo_aux'])} ± {metrics['elbo_aux_stderr']:.3f} (standard error; log",
      f"evidence {_number(metrics['log_evidence'])}), mass per mode {masses} against the true",
      f"{true}. The paper's own likelihood gave ELBO −1.79 → −1.45." + _run_time(run)])
  return f"{title}{image}\n\n{caption}\n"


def figure3(results_dir: str, output_dir: str) -> str:
  """Eight schools against NUTS."""
  title = "## Figure 3: eight schools, refined posterior against NUTS\n\n"
  run = _run(results_dir, "toy", "eight_schools")
  folder = os.path.dirname(run.path) if run else ""
  images = [_image(os.path.join(folder, name), output_dir, alt) for name, alt in
            (("figure_samples.png", "Figure 3, samples"), ("figure_kl.png", "Figure 3, KL"))]
  images = [image for image in images if image]
  if not run or not images:
    return title + "Not run yet.\n"
  metrics = run.payload["metrics"]
  ks = sorted(metrics["elbo_aux_by_k"], key=int)
  gaps = " → ".join(f"{g:.3f}" for g in _by_k(metrics["kl_auxiliary_by_k"]))
  knn = " / ".join(f"{v:.3f}" for v in _by_k(metrics["kl_by_k"]))
  caption = " ".join([
      f"Top: {_count(run.payload['flags'].get('num_samples'))} refined samples of (θ₁, log τ)",
      f"for K = {', '.join(ks)} auxiliary variables beside NUTS (max r-hat",
      f"{metrics['nuts_max_r_hat']:.3f}). Bottom right: the exact KL in the auxiliaries' space,",
      f"log p(y) − ELBO_aux, falls {gaps} as K goes {' → '.join(ks)} (log p(y) =",
      f"{_number(metrics['log_evidence_quadrature'])} by quadrature). Bottom left: the",
      f"sample-based k-NN KL to NUTS ({knn}) is too noisy to order K: sets of exact posterior",
      f"draws give {metrics['kl_exact_draws_mean']:.3f} ± {metrics['kl_exact_draws_std']:.3f}",
      "(grey band). The paper's KDE estimate of this KL decreases with K." + _run_time(run)])
  return title + "\n\n".join(images) + f"\n\n{caption}\n"


def _staircase(folder: str) -> str:
  """The whole-training-set ELBO_aux after each stage (stage_elbo_aux.csv), if it was recorded."""
  path = os.path.join(folder, "stage_elbo_aux.csv")
  if not os.path.exists(path):
    return ""
  with open(path) as stream:
    values = [float(row["elbo_aux_mean"]) for row in csv.DictReader(stream)]
  return (" Whole-training-set ELBO_aux, the VI draws then each stage: " +
          " → ".join(_number(v, ",.0f") for v in values) + ".")


def figure4(results_dir: str, output_dir: str) -> str:
  """ELBO_aux during refinement of the LeNet-5 runs, in Table 2's dataset order, then by seed."""
  title = "## Figure 4: ELBO_aux rises with every auxiliary variable (LeNet-5)\n\n"
  parts = []   # (the dataset's place in Table 2, its seed, its text)
  for path in results_loader.find_files(results_dir, "figure4_elbo_aux.png"):
    folder = os.path.dirname(path)
    run = next(iter(results_loader.load_runs(folder)), None)
    if run is None or run.payload.get("benchmark") != "image":
      continue
    metrics, flags = run.payload["metrics"], run.payload["flags"]
    dataset, seed = run.payload["dataset"], run.payload.get("seed")
    gain = metrics["elbo_aux"] - metrics["elbo"]
    text = (
        f"{_image(path, output_dir, 'Figure 4, ' + dataset)}\n\n"
        f"{dataset}, seed {seed}: the minibatch ELBO_aux of M = {flags.get('num_samples')} "
        f"members through K = {flags.get('num_auxiliary')} stages of "
        f"{flags.get('steps_per_auxiliary')} steps. VI ELBO {_number(metrics['elbo'], ',.0f')} → "
        f"ELBO_aux {_number(metrics['elbo_aux'], ',.0f')} ({gain:+,.0f} nats)."
        f"{_staircase(folder)}{_run_time(run)}\n")
    rank = IMAGE_DATASETS.index(dataset) if dataset in IMAGE_DATASETS else len(IMAGE_DATASETS)
    parts.append((rank, str(seed), text))
  if not parts:
    return title + "Not run yet.\n"
  return title + "\n".join(text for *_, text in sorted(parts)) + (
      "\nThe paper's Figure 4 is LeNet-5 on CIFAR-10; ours are the datasets above.\n")


# Figure 5's named row groups, in this order: (folder below the results directory, read even
# below ablations/; what the group is). Bandit runs anywhere else follow, grouped by settings.
FIGURE5_EVIDENCE = (
    (os.path.join("bandits", "mushroom"), "Figure 5 (the headline)"),
    (os.path.join("bandits", "ablations", "learned_noise"),
     "Ablation: the reward noise learned, as the first paper-scale runs did"),
)


def _bandit_run_groups(results_dir: str) -> list[tuple[Optional[str], list[str]]]:
  """(label, folders) of bandit runs that left regret records, grouped by the settings that shape
  their results (an agent run seed by seed, other agents elsewhere: one group): the groups of
  FIGURE5_EVIDENCE's folders first, labelled, in its order; then the rest, unlabelled, paper
  scale first."""
  from bandits import figure as bandit_figure  # pylint: disable=import-outside-toplevel
  from common.results import RESULTS_FILENAME  # pylint: disable=import-outside-toplevel
  named = [os.path.join(results_dir, folder) for folder, _ in FIGURE5_EVIDENCE]
  paths = set(results_loader.find_files(results_dir, "regret_*.npz"))
  for folder in named:
    paths |= set(results_loader.find_files(folder, "regret_*.npz"))
  groups: dict[tuple[int, str], tuple[dict, list[str]]] = {}
  for path in sorted(paths):
    folder = os.path.dirname(path)
    if not os.path.exists(os.path.join(folder, RESULTS_FILENAME)):
      continue   # a run stopped between its agents: not finished, not counted
    owners = [index for index, name in enumerate(named)
              if os.path.commonpath([os.path.abspath(name), os.path.abspath(folder)])
              == os.path.abspath(name)]
    owner = max(owners, key=lambda index: len(named[index])) if owners else len(named)
    settings = bandit_figure.run_settings(folder)
    _, folders = groups.setdefault((owner, repr(sorted(settings.items()))), (settings, []))
    if folder not in folders:
      folders.append(folder)
  ordered = sorted(groups.items(), key=lambda item: (item[0][0], not _paper_scale(item[1][0])))
  return [(FIGURE5_EVIDENCE[owner][1] if owner < len(named) else None, folders)
          for (owner, _), (_, folders) in ordered]


def _noise_text(flags: dict) -> str:
  """The reward-noise setting in words (runs made before --noise_scale learned theirs)."""
  scale = flags.get("noise_scale", "learned")
  return ("the reward noise scale learned" if scale in (None, "learned")
          else f"the reward noise scale fixed at {scale}")


def _paper_scale(flags: dict) -> bool:
  return flags["update_steps"] == 500 and flags["refine_steps"] == 500 and flags["horizon"] >= 5000


def _regret_verdict(records) -> str:
  """Which line has the lowest final cumulative regret, on the seeds every line has."""
  common = set.intersection(*(set(record.seeds) for record in records))
  if sum(len(record.line_names) for record in records) < 2:
    return "one line so far: no ordering to check yet."
  if not common:
    return "no seed is shared by every line: no ordering to check yet."
  finals = {}
  for record in records:
    rows = [row for row, seed in enumerate(record.seeds) if seed in common]
    for index, name in enumerate(record.line_names):
      finals[name] = float(record.cumulative()[rows, index, -1].mean())
  on = ""
  if any(set(record.seeds) != common for record in records):
    seeds = ", ".join(map(str, sorted(common)))
    on = (f" (on seeds {seeds}, the ones every line has)" if len(common) > 1 else
          f" (on seed {seeds}, the only one every line has)")
  best = min(finals, key=finals.get)
  if best == "refined_ts":
    return f"refined_ts has the lowest{on}, as in the paper."
  if "refined_ts" not in finals:
    return f"{best} is lowest{on}."
  return (f"the paper's ordering does not show{on}: {best} is lowest, refined_ts "
          f"{_count(round(finals['refined_ts']))} against {best}'s {_count(round(finals[best]))}.")


def figure5(results_dir: str, output_dir: str) -> str:
  """Thompson sampling on the mushroom bandit: per group of runs made with the same settings (an
  agent's seeds may come from several runs), its plot, table, settings and verdict."""
  from bandits import figure as bandit_figure  # pylint: disable=import-outside-toplevel
  from report import bandit_claims, bandit_regret_sources  # pylint: disable=import-outside-toplevel
  title = "## Figure 5: Thompson sampling on the mushroom contextual bandit\n\n"
  parts = []
  for number, (label, folders) in enumerate(_bandit_run_groups(results_dir), 1):
    flags = results_loader.load_runs(folders[0], "bandits")[0].payload["flags"]
    records = bandit_figure.records_in(folders)
    if len(folders) == 1:
      path = os.path.join(folders[0], bandit_figure.FIGURE_FILENAME)
    else:
      os.makedirs(output_dir, exist_ok=True)
      path = os.path.join(output_dir, f"figure5_runs_{number}.png")
      bandit_figure.draw_figure(records, path)
    table = bandit_figure.regret_table(records, flags["regret_report_interval"]).strip()
    scale = ("the paper's settings" if _paper_scale(flags) else
             f"a reduced schedule ({flags['update_steps']} update and {flags['refine_steps']} "
             f"refinement steps per bandit step, {flags['horizon']:,} steps; the paper: 500, "
             "500 and 5,000)") + f", {_noise_text(flags)}"
    seconds = sum(run.payload.get("timings", {}).get("total_seconds", 0.0)
                  for folder in folders for run in results_loader.load_runs(folder, "bandits"))
    runs = ", ".join(f"`{os.path.relpath(folder, results_dir)}`" for folder in folders)
    sources = bandit_regret_sources.line_summary_table(
        bandit_regret_sources.regret_sources(records)).strip()
    heading = f"**{number}. {label}.**\n\n" if label else ""
    parts.append(
        f"{heading}{_image(path, output_dir, 'Figure 5') or ''}\n\n{table}\n\n"
        f"Cumulative expected regret, mean ± std over each line's seeds (the table's seeds "
        f"column), at {scale}; from {runs}. Final: {_regret_verdict(records)} Machine time "
        f"{seconds / 3600:.1f} h.\n\n"
        f"Where the regret comes from, mean over each line's seeds "
        f"(`report.bandit_regret_sources`: 15 per poisonous mushroom eaten, 5 per edible one "
        f"passed; a seed stopped eating if it ate under 5 % of its second half's mushrooms):"
        f"\n\n{sources}\n\n"
        f"The paper's claims (`report.bandit_claims`), paired over seeds:\n\n"
        f"{bandit_claims.claims_table(bandit_claims.claims(records)).strip()}\n")
  if not parts:
    return title + "Not run yet.\n"
  return title + "\n".join(parts) + (
      f"\nWhy and what is left: {readme_link('bandits/README.md', output_dir)}.\n")
