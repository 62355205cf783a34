"""ResNet-20 on CIFAR-10 (paper Table 3)."""
