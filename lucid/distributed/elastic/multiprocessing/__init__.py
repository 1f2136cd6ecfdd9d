"""``errors.record``: a rank's uncaught exception written where the launcher reads it."""
