"""UCI regression benchmark (paper Table 1)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
