"""The mushroom contextual bandit (paper Section 4.3, Figure 5)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
