"""What every binary shares: seeding, results files, reports."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
