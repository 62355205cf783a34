"""What every binary shares: the settings machinery, device setup, seeding, data downloads and image
data, classification metrics, and writing results.json (reading them back is report/'s)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
