"""LeNet-5 image classification benchmark (paper Table 2 and Figure 4)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
