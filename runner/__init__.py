"""The experiment runner: the settings every method takes, the CLI every binary runs under, the
dispatch from a method name through the registry, checkpoint claims, the image benchmarks' run
(with its metrics, augmentation and refinement figures)."""
