"""Testing helpers: the strict stand-in device (``lucid.testing.strict_device``)."""
