"""Refined variational inference: local refinement of a mean-field posterior.

Havasi, Snoek, Tran, Gordon, Hernandez-Lobato, "Sampling the Variational
Posterior with Local Refinement", Entropy 2021.
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
