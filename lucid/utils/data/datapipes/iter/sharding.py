"""ShardingFilter (``sharding_filter``): each of n instances keeps every n-th element.

# NOTE [Sharding groups]
``apply_sharding(n, i, sharding_group)`` may be called once per group (DISTRIBUTED,
MULTIPROCESSING; or DEFAULT alone). The groups combine, highest priority innermost, into one
``(num_of_instances, instance_id)``: with 2 ranks and 3 workers, worker w of rank r keeps
element k when ``k % 6 == w + 3 * r`` — every element exactly once over all of them.
"""
from __future__ import annotations

from enum import IntEnum

from .._decorator import functional_datapipe
from ..datapipe import IterDataPipe
from .utils import _length_of


class SHARDING_PRIORITIES(IntEnum):
    DEFAULT = 1
    DISTRIBUTED = 2
    MULTIPROCESSING = 3


class _ShardingIterDataPipe(IterDataPipe):
    def apply_sharding(self, num_of_instances, instance_id, sharding_group):
        raise NotImplementedError


@functional_datapipe("sharding_filter")
class ShardingFilterIterDataPipe(_ShardingIterDataPipe):
    """Keep only this instance's share of the elements (functional name: ``sharding_filter``).

    A DataLoader with workers calls ``apply_sharding`` on it in each worker, so every sample is
    read by exactly one worker. See NOTE [Sharding groups].

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> dp = IterableWrapper(range(7)).sharding_filter()
    >>> dp.apply_sharding(3, 1)
    >>> list(dp)
    [1, 4]
    """

    def __init__(self, source_datapipe, sharding_group_filter=None):
        self.source_datapipe = source_datapipe
        self.sharding_group_filter = sharding_group_filter
        self.groups = {}
        self.num_of_instances, self.instance_id = 1, 0
        self._update_num_of_instances()

    def apply_sharding(self, num_of_instances, instance_id, sharding_group=SHARDING_PRIORITIES.DEFAULT):
        if instance_id >= num_of_instances:
            raise ValueError(f"instance_id({instance_id}) should be smaller than num_of_instances({num_of_instances})")
        default = SHARDING_PRIORITIES.DEFAULT
        if sharding_group == default and self.groups and default not in self.groups:
            raise RuntimeError("ShardingFilter cannot mix DEFAULT and non DEFAULT groups")
        if sharding_group != default and default in self.groups:
            raise RuntimeError("ShardingFilter cannot mix DEFAULT and non DEFAULT groups")
        self.groups[sharding_group] = (num_of_instances, instance_id)
        self._update_num_of_instances()

    def _update_num_of_instances(self):
        chosen = [self.groups[k] for k in sorted(self.groups)
                  if self.sharding_group_filter is None or k == self.sharding_group_filter]
        num, idx = 1, 0
        for group_num, group_id in reversed(chosen):
            idx += num * group_id
            num *= group_num
        self.num_of_instances, self.instance_id = num, idx

    def __iter__(self):
        for i, item in enumerate(self.source_datapipe):
            if i % self.num_of_instances == self.instance_id:
                yield item

    def __len__(self):
        n = _length_of(self, self.source_datapipe)
        return n // self.num_of_instances + (1 if self.instance_id < n % self.num_of_instances else 0)


ShardingFilter = ShardingFilterIterDataPipe
