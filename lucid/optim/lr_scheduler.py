"""Learning-rate schedulers."""
