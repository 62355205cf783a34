"""The step-floor workloads' chunk, batch sizes and learning rate: one definition for our loops
(`benchmarks.step_floor`) and their hand-written rewrites (`benchmarks.plain_tf2_loops`), so the
two cannot drift apart. No TensorFlow here: step_floor checks its flags before TensorFlow loads."""
CHUNK = 100
BATCH = 256
BANDIT_BATCH = 64      # the mushroom bandit's (paper Section 4.3)
LEARNING_RATE = 1e-3
