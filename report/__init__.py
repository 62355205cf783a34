"""The report: every benchmark's results beside the paper's (python -m report.main)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
