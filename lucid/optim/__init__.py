"""lucid.optim: optimizers."""
