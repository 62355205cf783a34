"""Baselines: mean-field VI, multiplicative normalizing flows, deep ensembles."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
