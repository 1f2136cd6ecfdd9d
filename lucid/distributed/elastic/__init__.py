"""The part of PyTorch's ``torch.distributed.elastic`` that training scripts import:
``multiprocessing.errors.record`` (``lucid-run`` is the launcher; there is no elastic agent)."""
