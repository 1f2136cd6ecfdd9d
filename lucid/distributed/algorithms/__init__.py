"""``lucid.distributed.algorithms``: DDP communication hooks (PyTorch's ``torch.distributed.algorithms``)."""
