"""Speed measurements (never timed assertions in tests)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
