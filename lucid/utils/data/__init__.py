"""lucid.utils.data: datasets, samplers and DataLoader."""
