"""How each method trains: VI and its family, VOGN, MNF, the deep ensemble, the particles, MISSO,
and the checkpointed training and layers they share. The methods' modules (methods/<name>.py)
call these; nothing here is imported before a run's flags are checked."""
