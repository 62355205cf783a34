"""The report: the paper's layout with σ differences, the differences list, machine time, figures.

A hand-made results directory with known numbers: UCI boston_housing (VI and refined VI, two seeds)
and LeNet-5 MNIST (VI and refined VI, one seed), the toy example with its figure, eight schools
without its figures, and a Figure 4 PNG for the MNIST refined run.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from report import main as report
from common.results import write_results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UCI_TIMINGS = {"train_seconds": 300.0, "refine_seconds": 30.0, "total_seconds": 360.0}
IMAGE_TIMINGS = {"train_seconds": 5000.0, "refine_seconds": 400.0, "total_seconds": 5400.0}


def _uci(root, method, seed, metrics):
  write_results(str(root / "uci" / "boston_housing" / method / f"seed_{seed}"), benchmark="uci",
                dataset="boston_housing", method=method, seed=seed, flags={},
                metrics={"num_train": 404, "target_std": 1.0, **metrics}, timings=UCI_TIMINGS)


def _image(root, method, metrics):
  folder = root / "image" / "mnist" / method / "seed_0"
  write_results(str(folder), benchmark="image", dataset="mnist", method=method, seed=0,
                flags={"num_samples": 10, "num_auxiliary": 5, "steps_per_auxiliary": 200},
                metrics=metrics, timings=IMAGE_TIMINGS)
  return folder


@pytest.fixture
def results(tmp_path):
  root = tmp_path / "results"
  # VI MLL mean -2.7: (-2.7 + 2.874) / 0.151 = +1.2 paper σ; refined -2.4: +2.4σ (beyond 2σ).
  # VI ELBO mean -665: +0.4σ; refined ELBO_aux -605: +3.3σ (target_std 1: no change of units).
  for seed, (vi_mll, refined_mll, elbo, elbo_aux) in enumerate([(-2.6, -2.3, -660.0, -600.0),
                                                                (-2.8, -2.5, -670.0, -610.0)]):
    _uci(root, "vi", seed, {"test_mll": vi_mll, "elbo": elbo})
    _uci(root, "refined_vi", seed, {"test_mll": refined_mll, "elbo": elbo, "elbo_aux": elbo_aux})
  # MNIST: refined MLL -0.0259 is -0.9σ; VI -0.0363 is -4.3σ; accuracy std 0 in the paper: no σ.
  _image(root, "vi", {"test_mll": -0.0363, "test_accuracy": 0.9905, "elbo": -9020.0})
  folder = _image(root, "refined_vi", {"test_mll": -0.0259, "test_accuracy": 0.9919,
                                       "elbo": -9020.0, "elbo_aux": -7458.0})
  (folder / "figure4_elbo_aux.png").write_bytes(b"png")
  toy = root / "toy" / "multimodal"
  write_results(str(toy), benchmark="toy", dataset="multimodal", method="refined_vi", seed=0,
                flags={"num_samples": 2000}, timings={"total_seconds": 8.0},
                metrics={"elbo": -0.546, "elbo_aux": -0.502, "elbo_aux_stderr": 0.006,
                         "log_evidence": -0.315, "refined_mass_per_mode": [0.02, 0.49, 0.47, 0.02],
                         "true_mass_per_mode": [0.03, 0.47, 0.47, 0.03]})
  (toy / "figure.png").write_bytes(b"png")
  write_results(str(root / "toy" / "eight_schools"), benchmark="toy", dataset="eight_schools",
                method="refined_vi", seed=0, flags={}, timings={},
                metrics={"elbo_aux_by_k": {"1": -31.47}})
  return root


def _run(*args):
  return subprocess.run([sys.executable, "-m", "report.main", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300)


def test_report_lays_out_tables_with_sigma_differences_seeds_and_machine_time(results, tmp_path):
  output = tmp_path / "report"
  text = open(report.write_report(str(results), str(output))).read()
  assert "−2.700 ± 0.141<br>(paper −2.874 ± 0.151, +1.2σ)" in text
  assert "−2.400 ± 0.141<br>(paper −2.851 ± 0.185, **+2.4σ**)" in text
  assert "−665 ± 7<br>(paper −668 ± 8, +0.4σ)" in text
  assert "−0.0259<br>(paper −0.025 ± 0.001, −0.9σ)" in text
  assert "99.19 %<br>(paper 99.2 ± 0.0 %)" in text   # the paper's std is 0: no σ
  assert "Every cell is the mean ± std over 2 seeds. Machine time: 24 min over 4 runs" in text
  assert "Every cell is one seed (no ± std). Machine time: 3.0 h over 2 runs" in text
  assert "Not run yet: concrete_strength, naval_propulsion" in text
  assert "Not run yet: fashion_mnist, cifar10." in text
  assert "**Table 3** (ResNet-20 image classification): not run yet." in text
  assert "## Figure 5: Thompson sampling on the mushroom contextual bandit\n\nNot run yet." in text
  differences = text.split("## Where we differ and why")[1].split("## Data")[0]
  assert "ELBO_aux ≥ ELBO in 2 of 2 refined VI runs." in differences
  assert "Beyond 2 paper σ: 2 of 4 cells:" in differences
  assert "boston_housing: Refined VI MLL **+2.4σ**, Refined VI ELBO_aux **+3.3σ**" in differences
  assert ("mnist: VI MLL **−4.3σ**, VI ELBO **−29.4σ**, Refined VI ELBO_aux **−27.1σ**"
          in differences)
  assert "uci/README.md#results-committed-under-resultsuci" in differences
  assert sorted(os.listdir(output)) == ["REPORT.md", "appendix.md", "image.csv", "toy.csv",
                                        "uci.csv"]


def test_a_report_of_smoke_runs_says_so_and_measures_nothing_against_the_paper(results, tmp_path):
  """Catches: smoke runs' tiny-setting numbers printed as bold distances from the paper."""
  completed = _run(f"--results_dir={results}", f"--output_dir={tmp_path / 'report'}",
                   "--format=latex", "--smoke")
  assert completed.returncode == 0, completed.stderr
  text = (tmp_path / "report" / "REPORT.md").read_text()
  assert text.split("\n\n")[1].startswith("**Smoke runs.**")
  assert "σ)" not in text and "Beyond 2 paper σ" not in text
  assert "distance from it in the paper's standard" not in text
  assert "−2.400 ± 0.141<br>(paper −2.851 ± 0.185)" in text
  assert text.count("Not set against the paper: these are smoke runs") == 2   # Tables 1 and 2
  assert "ELBO_aux ≥ ELBO in 2 of 2 refined VI runs." in text
  latex = (tmp_path / "report" / "table1_uci.tex").read_text()
  assert "$\\sigma$" not in latex and "smoke runs" in latex
  # The benchmark's own table binary says it too.
  table = subprocess.run([sys.executable, "-m", "report.uci_table",
                          f"--results_dir={results / 'uci'}", f"--output_dir={tmp_path / 'uci'}",
                          "--smoke"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert table.returncode == 0, table.stderr
  checks = (tmp_path / "uci" / "checks.md").read_text()
  assert "**Smoke runs**" in checks and "paper std" not in checks
  assert "**Smoke runs**" in (tmp_path / "uci" / "table.md").read_text()


def test_report_links_only_figures_that_exist_relative_to_the_report(results, tmp_path):
  output = tmp_path / "report"
  text = open(report.write_report(str(results), str(output))).read()
  links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
  assert links == ["../results/toy/multimodal/figure.png",
                   "../results/image/mnist/refined_vi/seed_0/figure4_elbo_aux.png"]
  assert all(os.path.exists(output / link) for link in links)
  assert "(d) 2,000 refined samples: ELBO_aux −0.502 ± 0.006" in text
  assert "VI ELBO −9,020 → ELBO_aux −7,458 (+1,562 nats)" in text
  figure3 = text.split("## Figure 3")[1].split("## Figure 4")[0]
  assert "Not run yet." in figure3   # its results.json exists, its figures do not


def _bandit_run(folder, final_regret, seeds, horizon=5000, update_steps=500, refine_steps=500,
                noise_scale="learned"):
  """A bandit run's results.json and regret record whose final cumulative expected regret is
  `final_regret[agent]` (a multiple of 5) on every seed: an agent that never eats, passing an
  edible mushroom on each of its first final / 5 steps."""
  from bandits.config import BanditConfig
  from bandits.interaction import RegretRecord
  flags = {**BanditConfig().as_dict(), "seeds": seeds, "horizon": horizon,
           "update_steps": update_steps, "refine_steps": refine_steps,
           "agents": list(final_regret), "noise_scale": noise_scale}
  write_results(str(folder), benchmark="bandits", dataset="mushroom",
                method=",".join(final_regret), flags=flags,
                metrics={"cumulative_regret": final_regret}, timings={"total_seconds": 3600.0})
  for agent, final in final_regret.items():
    shape = (len(seeds), 1, horizon)
    regret = np.zeros(shape, np.float32)
    regret[..., :int(final) // 5] = 5.0
    RegretRecord(line_names=[agent], seeds=seeds, actions=np.zeros(shape, np.int8),
                 rewards=np.zeros(shape), expected_regret=regret, realised_regret=regret,
                 seconds=3600.0).save(os.path.join(folder, f"regret_{agent}.npz"))


def test_table3_evidence_rows_and_figure5_with_its_settings_and_verdict(results, tmp_path):
  """ResNet-20 runs on another dataset are laid out without paper values and the paper's CIFAR-10
  rows are listed as not run; a reduced-scale bandit run is embedded with its scale and with the
  paper's ordering checked, not assumed."""
  for method, metrics in (("vi", {"test_mll": -0.45, "test_accuracy": 0.84, "elbo": -9e5}),
                          ("refined_vi", {"test_mll": -0.48, "test_accuracy": 0.83, "elbo": -9e5,
                                          "elbo_aux": -8.9e5})):
    write_results(str(results / "resnet" / "fashion_mnist" / "hybrid_bn" / method / "seed_0"),
                  benchmark="resnet", dataset="fashion_mnist", method=method, seed=0,
                  flags={"variational": "hybrid", "batchnorm": True}, metrics=metrics,
                  timings={"total_seconds": 600.0})
  bandit = results / "bandits" / "reduced"
  _bandit_run(bandit, {"refined_ts": 4740.0, "vi_ts": 2795.0}, seeds=[0, 1], horizon=3000,
              update_steps=50, refine_steps=50)
  (bandit / "figure5_cumulative_regret.png").write_bytes(b"png")
  # The paper-scale Figure 5 made in parts: vi_ts over seeds 0-1, refined_ts seed by seed.
  paper_scale = results / "bandits" / "mushroom"
  _bandit_run(paper_scale / "vi_ts", {"vi_ts": 9000.0}, seeds=[0, 1], noise_scale="0.5")
  _bandit_run(paper_scale / "refined_ts" / "seed_1", {"refined_ts": 5000.0}, seeds=[1],
              noise_scale="0.5")
  # The learned-noise runs, an ablation the report names (read below ablations/).
  _bandit_run(results / "bandits" / "ablations" / "learned_noise" / "vi_ts", {"vi_ts": 9500.0},
              seeds=[0])
  # A run stopped between its agents (a record, no results.json) is not counted.
  _bandit_run(paper_scale / "stopped", {"eps_greedy": 1.0}, seeds=[1])
  os.remove(paper_scale / "stopped" / "results.json")
  output = tmp_path / "report"
  text = open(report.write_report(str(results), str(output))).read()
  table3 = text.split("## Table 3")[1].split("## Figure 5")[0]
  assert "| fashion_mnist hybrid_bn | " in table3 and "−0.480 | 83.00 %" in table3
  assert ("Not run yet: resnet, resnet_batchnorm, resnet_hybrid, resnet_hybrid_batchnorm."
          in table3)
  assert ("| refined VI above VI in test MLL on every variant | does not hold | hybrid_bn: "
          "−0.030, refined_vi higher on 0 of 1 seeds |") in table3
  figure5 = text.split("## Figure 5")[1].split("## Where we differ")[0]
  # The named groups first, in their order, then the unnamed reduced-scale run.
  paper_part, rest = figure5.split("**2. Ablation: the reward noise learned")
  ablation_part, reduced_part = rest.split("Machine time", 1)
  assert "**1. Figure 5 (the headline).**" in paper_part
  assert "at the paper's settings, the reward noise scale fixed at 0.5" in paper_part
  assert "the reward noise scale learned" in ablation_part and "| vi_ts | 0 |" in ablation_part
  assert "![Figure 5](../results/bandits/reduced/figure5_cumulative_regret.png)" in reduced_part
  assert "| agent | seeds | 1,000 | 2,000 | 3,000 | realised, final |" in reduced_part
  assert "reduced schedule (50 update and 50 refinement steps per bandit step, 3,000 steps" in (
      reduced_part)
  assert "**3." not in reduced_part   # only the named groups have headings
  assert "the paper's ordering does not show: vi_ts is lowest, refined_ts 4,740" in reduced_part
  # The parts are one figure, drawn into the report, compared on the seed both lines have.
  assert "![Figure 5](figure5_runs_1.png)" in paper_part
  assert (output / "figure5_runs_1.png").exists()
  assert "| refined_ts | 1 |" in paper_part and "| vi_ts | 0,1 |" in paper_part
  assert "at the paper's settings" in paper_part
  # Where the regret comes from: these agents never eat, so every seed stopped eating.
  assert "| vi_ts | 0,1 | 0 | 1,800 | 0.00 | 2 of 2 (0,1) |" in figure5
  assert ("refined_ts has the lowest (on seed 1, the only one every line has), as in the paper."
          in paper_part)
  # The paper's claims, paired on the seed both Thompson samplers have: level at step 1,000
  # (both passed 1,000 edible mushrooms), refined_ts 4,000 lower from step 2,000.
  assert ("| refined_ts below vi_ts at every 1,000 steps | does not hold | refined_ts − vi_ts: +0 "
          "at 1,000 (refined_ts won 0 of 1); −4,000 at 2,000 (refined_ts won 1 of 1)") in figure5
  differences = text.split("## Where we differ and why")[1]
  first_evidence = differences.split("  - 3. First evidence")[1].split("  - 4. ")[0]
  assert "Refined VI's mean MLL ≥ VI's on 0 of 1 rows (not: fashion_mnist hybrid_bn)" in (
      first_evidence)


def test_a_run_without_a_metric_gets_a_dash_in_its_cell(results, tmp_path):
  """A run whose results.json lacks a table's metric (a hand-made or re-evaluated run without
  test accuracy): its cell is "–", beside the paper's value where there is one, and the rest of
  the report is written. The bug: the report stopped with a TypeError formatting None."""
  write_results(str(results / "resnet" / "fashion_mnist" / "hybrid_bn" / "vi" / "seed_0"),
                benchmark="resnet", dataset="fashion_mnist", method="vi", seed=0,
                flags={"variational": "hybrid", "batchnorm": True},
                metrics={"test_mll": -0.45, "elbo": -9e5}, timings={"total_seconds": 600.0})
  _image(results, "mnf", {"test_mll": -0.03})
  for output_format in ("markdown", "latex"):
    text = open(report.write_report(str(results), str(tmp_path / output_format),
                                    output_format=output_format)).read()
    table3 = text.split("## Table 3")[1].split("## Figure 5")[0]
    assert "| fashion_mnist hybrid_bn | not run | not run | −0.450 | – | " in table3
    table2 = text.split("## Table 2")[1].split("## Table 3")[0]
    assert "−0.0300<br>(paper " in table2 and "| –<br>(paper 99." in table2


def test_latex_format_writes_both_tables_through_the_command_line(results, tmp_path):
  output = tmp_path / "report"
  completed = _run(f"--results_dir={results}", f"--output_dir={output}", "--format=latex")
  assert completed.returncode == 0, completed.stderr
  for name in ("table1_uci.tex", "table2_lenet5.tex"):
    latex = (output / name).read_text()
    assert "\\begin{tabular}" in latex and "\\end{tabular}" in latex
  assert "$-$0.0259" in (output / "table2_lenet5.tex").read_text()
  assert "[table1_uci.tex](table1_uci.tex)" in (output / "REPORT.md").read_text()


@pytest.mark.parametrize("make_smoke_run", [False, True])
def test_a_results_dir_without_results_is_one_line_naming_it_and_nothing_written(
    tmp_path, make_smoke_run):
  empty = tmp_path / "empty"
  empty.mkdir()
  if make_smoke_run:   # smoke runs are not results
    write_results(str(empty / "smoke" / "uci"), benchmark="uci", method="vi", flags={},
                  metrics={}, timings={})
  output = tmp_path / "report"
  completed = _run(f"--results_dir={empty}", f"--output_dir={output}")
  assert completed.returncode == 2
  assert completed.stderr.count("\n") == 1 and str(empty) in completed.stderr
  assert "no results.json" in completed.stderr
  assert not output.exists()


def test_related_tables_enter_the_report_under_one_section(tmp_path):
  """results/related/uci_table.md is embedded with its headings demoted below the section's;
  without it the section says so instead of vanishing."""
  assert "Not run yet." in report._related_section(str(tmp_path), str(tmp_path / "report"))
  (tmp_path / "related").mkdir()
  (tmp_path / "related" / "uci_table.md").write_text("# UCI: VOGN\n\n## Test MLL\n\n| a |\n")
  section = report._related_section(str(tmp_path), str(tmp_path / "report"))
  assert section.startswith("## Beyond the paper: related methods")
  assert "related/README.md" not in section   # no link to a README that is not there
  (tmp_path / "related" / "README.md").write_text("# Related\n")
  section = report._related_section(str(tmp_path), str(tmp_path / "report"))
  assert "[related/README.md](../related/README.md)" in section
  assert "\n### UCI: VOGN\n" in section and "\n#### Test MLL\n" in section and "| a |" in section
  # A figure's table without a heading of its own gets the one the report gives it.
  bandit = tmp_path / "related" / "bandits" / "mushroom_updates_50"
  bandit.mkdir(parents=True)
  (bandit / "figure5_cumulative_regret.md").write_text("| agent | 1,000 |\n")
  section = report._related_section(str(tmp_path), str(tmp_path / "report"))
  assert "\n### Mushroom bandit, 50 update steps: Thompson sampling with SVGD" in section
  assert section.index("### Mushroom bandit") < section.index("| agent | 1,000 |")
