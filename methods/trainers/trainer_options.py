"""Names of the trainers' options, without TensorFlow, so that settings can offer them as choices
before it loads (the trainers check them too)."""

# VI's optimisers (methods.trainers.vi.MeanFieldTrainer): the paper's Adam, momentum SGD and MISSO.
VI_OPTIMIZERS = ("adam", "momentum", "misso")
# Initial weights of the particles (methods.trainers.particles): the deep ensemble's (He-normal
# hidden,
# Glorot-uniform output) or the f-POVI authors' N(0, 1 / (fan_in + fan_out + 1)) on every kernel.
PARTICLE_INITIALIZERS = ("he_glorot", "fpovi")
