"""The methods the benchmarks compare, one module each, found by name in `methods.registry`."""
