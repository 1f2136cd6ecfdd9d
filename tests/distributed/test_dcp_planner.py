"""Custom planners and storage of distributed checkpoints (NOTE [Checkpoint plans]): the key
renaming and dtype change of PyTorch's DCP tutorial, an in-memory StorageWriter/Reader pair,
partial loads and the call order of the protocol. Single process; the MPI suites of
test_dcp.py run the same protocol with the default planner on 2 and 3 ranks.
"""
import numpy as np
import pytest

import lucid
import lucid.distributed.checkpoint as dcp
import lucid.nn as nn
from lucid.distributed.checkpoint import (DefaultLoadPlanner, DefaultSavePlanner, LoadItemType, StorageReader,
                                          StorageWriter, WriteItemType, WriteResult)


def _model(seed):
    lucid.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


class RenameSavePlanner(DefaultSavePlanner):
    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        super().set_up_planner({"foo_" + k: v for k, v in state_dict.items()}, storage_meta, is_coordinator)


class RenameLoadPlanner(DefaultLoadPlanner):
    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        super().set_up_planner({"foo_" + k: v for k, v in state_dict.items()}, metadata, is_coordinator)


def test_a_save_planner_renames_keys_and_a_load_planner_reads_them_back(tmp_path):
    model = _model(0)
    meta = dcp.save({"model": model.state_dict(), "step": 4}, checkpoint_id=tmp_path, planner=RenameSavePlanner())
    assert sorted(meta.state_dict_metadata) == ["foo_model.0.bias", "foo_model.0.weight", "foo_model.2.bias",
                                                 "foo_model.2.weight", "foo_step"]
    other = _model(1)
    sd = {"model": other.state_dict(), "step": 0}
    with pytest.raises(dcp.CheckpointException, match="missing key"):
        dcp.load(sd, checkpoint_id=tmp_path)  # the plain names are not there
    dcp.load(sd, checkpoint_id=tmp_path, planner=RenameLoadPlanner())
    for a, b in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    # a top-level value goes to the planner's renamed copy, as PyTorch's flattened copy: the tensors load in place
    assert sd["step"] == 0


class HalfPrecisionSavePlanner(DefaultSavePlanner):
    """The tutorial's transform: every tensor is stored as float16."""

    def create_local_plan(self):
        plan = super().create_local_plan()
        for item in plan.items:
            if item.tensor_data is not None:
                item.tensor_data.properties.dtype = lucid.float16
        return plan

    def resolve_data(self, write_item):
        value = super().resolve_data(write_item)
        return value if write_item.type == WriteItemType.BYTE_IO else value.to(lucid.float16)


def test_a_save_planner_changes_the_stored_dtype(tmp_path):
    x = np.linspace(-3, 3, 12).reshape(3, 4) / 7
    dcp.save({"w": lucid.tensor(x), "n": 2, "s": lucid.tensor(1.25)}, checkpoint_id=tmp_path,
             planner=HalfPrecisionSavePlanner())
    meta = dcp.FileSystemReader(tmp_path).read_metadata().state_dict_metadata
    assert meta["w"]["dtype"] == "float16" and meta["n"]["kind"] == "value"
    sd = {"w": lucid.zeros(3, 4, dtype=lucid.float64), "n": 0, "s": lucid.tensor(0.0)}
    dcp.load(sd, checkpoint_id=tmp_path)
    assert sd["s"].item() == 1.25 and meta["s"]["dtype"] == "float16"  # a 0-d tensor too
    np.testing.assert_array_equal(sd["w"].numpy(), x.astype(np.float16).astype(np.float64))
    assert sd["w"].dtype == lucid.float64 and sd["n"] == 2


class MemoryWriter(StorageWriter):
    """Keeps a checkpoint in a dict: ``{"metadata": ..., "data": {(fqn, offset): value}}``."""

    def __init__(self, box):
        self.box, self.calls = box, []

    def set_up_storage_writer(self, is_coordinator):
        self.calls.append("set_up")

    def prepare_local_plan(self, plan):
        self.calls.append("local")
        return plan

    def prepare_global_plan(self, plans):
        self.calls.append("global")
        return plans

    def write_data(self, plan, planner):
        self.calls.append("write")
        results = []
        for item in plan.items:
            where = (item.index.fqn, item.index.offset)
            self.box.setdefault("data", {})[where] = planner.resolve_data(item)
            results.append(WriteResult(item.index, item.tensor_storage_size() or 0, where))
        from concurrent.futures import Future

        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        self.calls.append("finish")
        self.box["metadata"] = metadata
        self.box["results"] = results


class MemoryReader(StorageReader):
    def __init__(self, box):
        self.box = box

    def read_metadata(self):
        return self.box["metadata"]

    def set_up_storage_reader(self, metadata, is_coordinator):
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        for item in plan.items:
            value = self.box["data"][(item.storage_index.fqn, item.storage_index.offset)]
            if item.type == LoadItemType.BYTE_IO:
                planner.load_bytes(item, value)
                continue
            region = tuple(slice(o, o + n) for o, n in zip(item.storage_offsets, item.lengths))
            target = planner.resolve_tensor(item)
            target.copy_(value[region] if region else value)  # a 0-d piece whole
            planner.commit_tensor(item, target)


def test_a_custom_storage_writer_and_reader_pair(tmp_path):
    model, box = _model(0), {}
    opt = lucid.optim.Adam(model.parameters(), lr=0.1)
    model(lucid.randn(5, 3, dtype=lucid.float64)).sum().backward()
    opt.step()
    writer = MemoryWriter(box)
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "tag": ("a", 1)}, storage_writer=writer)
    assert writer.calls == ["set_up", "local", "global", "write", "finish"]
    assert not list(tmp_path.iterdir())  # nothing on disk
    assert {r.index.fqn for r in box["results"][0]} == set(box["metadata"].state_dict_metadata)
    other = _model(1)
    oopt = lucid.optim.Adam(other.parameters(), lr=0.1)
    other(lucid.randn(5, 3, dtype=lucid.float64)).sum().backward()
    oopt.step()
    sd = {"model": other.state_dict(), "optim": oopt.state_dict(), "tag": None}
    dcp.load(sd, storage_reader=MemoryReader(box))
    oopt.load_state_dict(sd["optim"])
    for a, b in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    st, ost = opt.state_dict()["state"], oopt.state_dict()["state"]
    for i in st:
        np.testing.assert_array_equal(st[i]["exp_avg_sq"].numpy(), ost[i]["exp_avg_sq"].numpy())
    assert sd["tag"] == ("a", 1)


def test_partial_loads_and_bad_planners(tmp_path):
    dcp.save({"a": lucid.ones(2)}, checkpoint_id=tmp_path)
    sd = {"a": lucid.zeros(2), "b": lucid.zeros(3)}
    with pytest.raises(dcp.CheckpointException, match=r"missing key\(s\) in the checkpoint: \['b'\]"):
        dcp.load(sd, checkpoint_id=tmp_path)
    assert sd["a"].tolist() == [0.0, 0.0]  # nothing changed
    dcp.load(sd, checkpoint_id=tmp_path, planner=DefaultLoadPlanner(allow_partial_load=True))
    assert sd["a"].tolist() == [1.0, 1.0] and sd["b"].tolist() == [0.0] * 3
    with pytest.raises(TypeError, match="custom planners must be SavePlanner instances"):
        dcp.save({"a": lucid.ones(1)}, checkpoint_id=tmp_path, planner=DefaultLoadPlanner())
    with pytest.raises(TypeError, match="expected a StorageReader, got FileSystemWriter"):
        dcp.load(sd, storage_reader=dcp.FileSystemWriter(tmp_path))


def test_a_failing_read_changes_nothing(tmp_path):
    dcp.save({"a": lucid.ones(2), "b": lucid.full((2,), 2.0)}, checkpoint_id=tmp_path)

    class Broken(dcp.FileSystemReader):
        def read_data(self, plan, planner):
            first, *_ = plan.items
            target = planner.resolve_tensor(first)
            target.copy_(lucid.full(first.lengths, 9.0))
            planner.commit_tensor(first, target)
            raise OSError("disk gone")

    sd = {"a": lucid.zeros(2), "b": lucid.zeros(2)}
    with pytest.raises(dcp.CheckpointException, match="disk gone"):
        dcp.load(sd, storage_reader=Broken(tmp_path))
    assert sd["a"].tolist() == [0.0, 0.0] and sd["b"].tolist() == [0.0, 0.0]


def test_read_items_cover_each_target_region_from_the_saved_pieces(tmp_path):
    dcp.save({"w": lucid.arange(12.0).reshape(3, 4)}, checkpoint_id=tmp_path)
    planner = DefaultLoadPlanner()
    planner.set_up_planner({"w": lucid.zeros(3, 4)}, dcp.FileSystemReader(tmp_path).read_metadata(), True)
    (item,) = planner.create_local_plan().items
    assert item.type == LoadItemType.TENSOR and item.lengths == (3, 4) and item.storage_offsets == (0, 0)
    assert item.dest_index.fqn == "w" and item.storage_index.offset == (0, 0)


def test_load_sharded_optimizer_state_dict_reads_the_state_by_parameter_names(tmp_path):
    from lucid.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
    from lucid.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    model = _model(0)
    opt = lucid.optim.Adam(model.parameters(), lr=0.05)
    x = lucid.randn(5, 3, dtype=lucid.float64)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
    saved = get_optimizer_state_dict(model, opt)
    dcp.save({"model": model.state_dict(), "optim": saved}, checkpoint_id=tmp_path)
    got = load_sharded_optimizer_state_dict(model.state_dict(), "optim", dcp.FileSystemReader(tmp_path))
    assert set(got) == {"optim"} and set(got["optim"]["state"]) == set(saved["state"])
    for name, st in saved["state"].items():
        for k, v in st.items():
            np.testing.assert_array_equal(np.asarray(got["optim"]["state"][name][k]), np.asarray(v))
    assert got["optim"]["param_groups"][0]["lr"] == 0.05
    assert got["optim"]["param_groups"][0]["params"] == saved["param_groups"][0]["params"]
    # it loads into a fresh optimizer, which then steps as the original
    other = _model(0)
    oopt = lucid.optim.Adam(other.parameters(), lr=0.5)
    other.load_state_dict(model.state_dict())
    set_optimizer_state_dict(other, oopt, got["optim"])
    for m, o in ((model, opt), (other, oopt)):
        o.zero_grad()
        m(x).pow(2).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
