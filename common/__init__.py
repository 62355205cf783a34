"""What every binary shares: the settings machinery, device setup, seeding, argument checks, data
downloads and image data, and writing results.json (reading them back is report/'s). The bottom
layer: it imports no other package of the repository."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
