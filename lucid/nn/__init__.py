"""lucid.nn: modules, layers, losses."""
