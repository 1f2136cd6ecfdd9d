"""lucid.hub (NOTE [Hub]), lucid.version, lucid.mps / lucid.xpu and lucid.OutOfMemoryError."""
import hashlib
import os

import pytest

import lucid


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "helpers.py").write_text("WIDTH = 4\n")
    (tmp_path / "hubconf.py").write_text(
        "dependencies = ['numpy']\n"
        "from helpers import WIDTH\n"
        "def mlp(width=WIDTH):\n    '''A one-layer model.'''\n    import lucid\n    return lucid.nn.Linear(2, width)\n"
        "def _private():\n    pass\n")
    return str(tmp_path)


def test_local_hubconf_entrypoints(repo, tmp_path):
    assert lucid.hub.list(repo, source="local") == ["mlp"]
    assert lucid.hub.help(repo, "mlp", source="local") == "A one-layer model."
    assert lucid.hub.load(repo, "mlp", source="local").out_features == 4  # hubconf imports its repo
    assert lucid.hub.load(repo, "mlp", 7, source="local").out_features == 7
    with pytest.raises(RuntimeError, match="Cannot find callable nope in hubconf"):
        lucid.hub.load(repo, "nope", source="local")
    with pytest.raises(ValueError, match='Unknown source: "x". Allowed values: "github" | "local".'):
        lucid.hub.load(repo, "mlp", source="x")
    other = tmp_path / "other"
    other.mkdir()
    (other / "hubconf.py").write_text("dependencies = ['no_such_package_xyz']\ndef m():\n    return 1\n")
    with pytest.raises(RuntimeError, match="Missing dependencies: no_such_package_xyz"):
        lucid.hub.load(str(other), "m", source="local")


def test_untrusted_github_repository_is_refused_before_any_download(tmp_path, monkeypatch):
    monkeypatch.setattr(lucid.hub, "_HUB_DIR", [str(tmp_path / "hub")])
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    with pytest.raises(ValueError, match="Untrusted repository."):
        lucid.hub.load("someone/somerepo", "model", trust_repo="check")
    assert not os.path.exists(tmp_path / "hub" / "someone_somerepo_main")
    with pytest.raises(ValueError, match="Invalid repo"):
        lucid.hub.load("no-slash", "model")


def test_checkpoints_download_once_and_check_their_hash(tmp_path, monkeypatch):
    monkeypatch.setattr(lucid.hub, "_HUB_DIR", [str(tmp_path / "hub")])
    src = tmp_path / "weights.pt"
    lucid.save({"w": lucid.arange(3.0)}, str(src))
    url = "file://" + str(src)
    assert lucid.hub.load_state_dict_from_url(url, progress=False)["w"].tolist() == [0.0, 1.0, 2.0]
    cached = tmp_path / "hub" / "checkpoints" / "weights.pt"
    assert cached.exists()
    src.unlink()  # the second call reads the cache
    assert lucid.hub.load_state_dict_from_url(url, progress=False)["w"].tolist() == [0.0, 1.0, 2.0]
    lucid.save({"v": lucid.ones(1)}, str(src))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    good = lucid.hub.load_state_dict_from_url(url, file_name=f"v-{digest[:8]}.pt", check_hash=True, progress=False)
    assert good["v"].tolist() == [1.0]
    with pytest.raises(RuntimeError, match='invalid hash value \\(expected "deadbeef"'):
        lucid.hub.load_state_dict_from_url(url, file_name="v-deadbeef.pt", check_hash=True, progress=False)
    leftovers = sorted(os.listdir(tmp_path / "hub" / "checkpoints"))
    assert leftovers == sorted(["weights.pt", f"v-{digest[:8]}.pt"])  # no partial or bad file left


def test_torch_checkpoint_from_a_url_when_torch_is_installed(tmp_path):
    torch = pytest.importorskip("torch")
    src = tmp_path / "resnet-ish.pth"
    torch.save({"conv.weight": torch.ones(2, 1, 3, 3), "fc.bias": torch.zeros(2)}, str(src))
    state = lucid.hub.load_state_dict_from_url("file://" + str(src), model_dir=str(tmp_path / "cache"),
                                               progress=False)
    assert state["conv.weight"].shape == (2, 1, 3, 3) and state["fc.bias"].tolist() == [0.0, 0.0]


def test_versions_and_absent_devices():
    assert lucid.version.__version__ == lucid.__version__ and lucid.version.debug is False
    assert lucid.version.hip is None and lucid.version.git_version == "unknown"
    if not lucid.cuda.is_available():
        assert lucid.version.cuda is None or isinstance(lucid.version.cuda, str)
    assert (lucid.mps.is_available(), lucid.mps.device_count(), lucid.xpu.is_available()) == (False, 0, False)
    lucid.mps.manual_seed(0), lucid.xpu.manual_seed_all(0)  # accepted, as PyTorch without the device
    with pytest.raises(RuntimeError, match="without MPS backend"):
        lucid.mps.synchronize()
    with pytest.raises(AssertionError, match="not compiled with XPU enabled"):
        lucid.xpu.current_device()


def test_cupys_out_of_memory_error_becomes_pytorchs(monkeypatch):
    from lucid._core.primitive import REGISTRY

    class OutOfMemoryError(MemoryError):  # stands for cupy.cuda.memory.OutOfMemoryError
        __module__ = "cupy.cuda.memory"

    def fail(*args, **kwargs):
        raise OutOfMemoryError("Out of memory allocating 4,000,000,000 bytes")

    monkeypatch.setattr(REGISTRY["exp"], "impl", fail)
    with pytest.raises(lucid.OutOfMemoryError, match=r"^exp: CUDA out of memory. Out of memory allocating"):
        lucid.ones(2).exp()
    assert lucid.OutOfMemoryError is lucid.cuda.OutOfMemoryError and issubclass(lucid.OutOfMemoryError, RuntimeError)
