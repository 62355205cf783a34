"""The paper's illustrations: a multimodal toy posterior and eight schools."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
