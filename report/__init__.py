"""Reporting: reads finished runs (results.json, regret records, training traces) and writes the
tables, figures and REPORT.md that set them beside the paper's (`python -m report.main`).

Every results.json is read through `results_loader` and its one rule for which runs count. Each
benchmark table module (`uci_table`, `image_table`, `resnet_table`) declares the paper table it
reproduces and the folders of runs it reports; `main` lays them out with `paper_comparison`,
`figures` and `appendix`. The related methods' tables, the seed-for-seed comparisons and the
diagnostics are commands of their own here too. Nothing under report/ trains a model.
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
