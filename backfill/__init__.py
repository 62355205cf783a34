"""Scripts that added a metric to committed results.json files after their runs were made.

Each copies or recomputes a value a run did not record and marks it with a "backfilled" note
naming the script and its commit (`common.results.backfill_note`), so nobody mistakes it for a
recorded one. Kept so that the notes name code that exists.
"""
