"""PyTorch's ``torch.ao.pruning._experimental``: sparsifiers of raw data (tensors, embeddings)
and their scheduler."""
