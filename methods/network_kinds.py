"""The kinds of network this package's methods build, by the name a benchmark's `Networks` supplies
each builder under (`registry.Networks.builder`, `registry.Method.needs`).

A kind's name and its builder's signature are an agreement between the methods that need it and
the benchmarks that supply it. The registry keeps no list of kinds: it learns them from the
methods' `needs`. So a method that needs an architecture of its own names its kind in its own
module, and the benchmarks that offer it add that builder; nothing here changes. These four live
here because several method modules and a trainer (`methods.trainers.vi_family`) build from them.
"""

# num_members (None: no member axis) -> Gaussian mean-field network (vi and its family, vogn).
MEAN_FIELD = "mean_field"
# () -> network of multiplicative normalizing flows (mnf).
MNF = "mnf"
# num_members -> point-weight members on a member axis (deep_ensemble).
ENSEMBLE = "ensemble"
# num_particles -> point-weight networks on a member axis (svgd, fsvgd; methods.trainers.particles).
PARTICLES = "particles"
