"""``lucid.hub`` (PyTorch's ``torch.hub``): models from a repository's ``hubconf.py`` and
checkpoints from a URL, cached on disk.

NOTE [Hub]
``load(repo_or_dir, model, source="local")`` imports ``<dir>/hubconf.py`` (the user names the
code to run, as in PyTorch), checks its ``dependencies`` list and calls the entrypoint;
``source="github"`` downloads ``owner/repo[:ref]`` as a zip archive into ``get_dir()`` first,
asking before it runs code from a repository not trusted yet (``trust_repo``), as PyTorch.
``load_state_dict_from_url`` downloads a checkpoint once into ``<hub dir>/checkpoints`` and
loads it with :func:`lucid.load`, which reads Lucid's and PyTorch's files and never executes
code from them (``weights_only`` is accepted: loading is always weights-only). Downloads are
written to a temporary file beside the target and renamed, so an interrupted download never
leaves a truncated file; a file name ``name-<hex>.ext`` with ``check_hash=True`` must match
the SHA-256 prefix ``<hex>``. The hub directory is ``$LUCID_HOME/hub`` (``$TORCH_HOME/hub``
when only that is set), else ``~/.cache/lucid/hub``; :func:`set_dir` overrides it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile

__all__ = ["download_url_to_file", "get_dir", "help", "list", "load", "load_state_dict_from_url", "set_dir"]

_HUB_DIR = [None]
_HASH_IN_NAME = re.compile(r"-([a-f0-9]*)\.")
_builtin_list = list


def get_dir() -> str:
    """The directory models and checkpoints are cached in (see NOTE [Hub]).

    Examples
    --------
    >>> import lucid
    >>> lucid.hub.get_dir().endswith("hub")
    True
    """
    if _HUB_DIR[0] is not None:
        return _HUB_DIR[0]
    home = os.environ.get("LUCID_HOME") or os.environ.get("TORCH_HOME")
    if home is None:
        home = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lucid")
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d) -> None:
    """Use ``d`` as the hub directory from now on."""
    _HUB_DIR[0] = os.path.expanduser(os.fspath(d))


def download_url_to_file(url, dst, hash_prefix=None, progress=True) -> None:
    """Download ``url`` to the file ``dst``: through a temporary file renamed into place, so
    ``dst`` is never left half written; with ``hash_prefix`` the SHA-256 of the content must
    start with it (RuntimeError otherwise, and ``dst`` is not written)."""
    dst = os.path.expanduser(os.fspath(dst))
    folder = os.path.dirname(os.path.abspath(dst))
    os.makedirs(folder, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url) as response:  # noqa: S310
            while True:
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
                digest.update(chunk)
        if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
            raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got "{digest.hexdigest()}")')
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True, check_hash=False,
                             file_name=None, weights_only=False):
    """The object saved at ``url``, downloaded once into ``<hub dir>/checkpoints`` (or
    ``model_dir``) and loaded with :func:`lucid.load` (see NOTE [Hub]).

    Examples
    --------
    >>> import lucid, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> lucid.save({"w": lucid.ones(2)}, os.path.join(folder, "w.pt"))
    >>> url = "file://" + os.path.join(folder, "w.pt")
    >>> lucid.hub.load_state_dict_from_url(url, model_dir=os.path.join(folder, "cache"), progress=False)
    {'w': tensor([1., 1.])}
    """
    model_dir = os.path.join(get_dir(), "checkpoints") if model_dir is None else os.path.expanduser(model_dir)
    os.makedirs(model_dir, exist_ok=True)
    name = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    if not name:
        raise ValueError(f"load_state_dict_from_url: no file name in {url!r}; pass file_name=")
    cached = os.path.join(model_dir, name)
    if not os.path.exists(cached):
        if progress:
            sys.stderr.write(f'Downloading: "{url}" to {cached}\n')
        found = _HASH_IN_NAME.search(name) if check_hash else None
        download_url_to_file(url, cached, found.group(1) if found else None, progress=progress)
    from .serialization import load as _load

    return _load(cached, map_location=map_location)


# ------------------------------------------------------------------------------- hubconf

def _import_hubconf(repo_dir):
    path = os.path.join(repo_dir, "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"[Errno 2] No such file or directory: {path!r}")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, repo_dir)  # hubconf imports the repository's own modules
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(repo_dir)
    missing = [d for d in getattr(module, "dependencies", []) if importlib.util.find_spec(d) is None]
    if missing:
        raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
    return module


def _entrypoint(module, model):
    if not isinstance(model, str):
        raise ValueError("Invalid input: model should be a string of function name")
    fn = getattr(module, model, None)
    if fn is None or not callable(fn):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return fn


def _parse_repo(github):
    repo, _, ref = github.partition(":")
    owner, _, name = repo.partition("/")
    if not owner or not name:
        raise ValueError(f'Invalid repo: "{github}"; expected "repo_owner/repo_name[:ref]"')
    return owner, name, ref or "main"


def _trusted_file():
    return os.path.join(get_dir(), "trusted_list")


_TRUSTED_OWNERS = ("facebookresearch", "facebookincubator", "pytorch", "fairinternal")


def _check_trust(owner, name, trust_repo, cached):
    """PyTorch's rules: True trusts, None warns, "check" asks unless the repository is trusted or
    cached, False always asks; a trusted answer is remembered in ``<hub dir>/trusted_list``."""
    key = f"{owner}_{name}"
    trusted = []
    if os.path.exists(_trusted_file()):
        with open(_trusted_file()) as f:
            trusted = [line.strip() for line in f]
    known = key in trusted or owner in _TRUSTED_OWNERS or cached
    if trust_repo is None:
        if not known:
            import warnings

            warnings.warn("You are about to download and run code from an untrusted repository. In a future "
                          "release, this won't be allowed. To add the repository to your trusted list, change "
                          "the command to {calling_fn}(..., trust_repo=False) and a command prompt will appear "
                          "asking for an explicit confirmation of trust, or load(..., trust_repo=True), which "
                          "will assume that the prompt is to be answered with 'yes'.", stacklevel=4)
        return
    if trust_repo is False or (trust_repo == "check" and not known):
        answer = input(f"The repository {owner}/{name} does not belong to the list of trusted repositories "
                       "and as such cannot be downloaded. Do you trust this repository and wish to add it to "
                       "the trusted list of repositories (y/N)?")
        if answer.strip().lower() not in ("y", "yes"):
            raise ValueError("Untrusted repository.")
    if key not in trusted and owner not in _TRUSTED_OWNERS:
        os.makedirs(get_dir(), exist_ok=True)
        with open(_trusted_file(), "a") as f:
            f.write(key + "\n")


def _github_dir(github, force_reload, trust_repo, verbose):
    owner, name, ref = _parse_repo(github)
    hub = get_dir()
    target = os.path.join(hub, f"{owner}_{name}_{ref.replace('/', '_')}")
    cached = os.path.isdir(target)
    _check_trust(owner, name, trust_repo, cached)
    if cached and not force_reload:
        if verbose:
            sys.stderr.write(f"Using cache found in {target}\n")
        return target
    os.makedirs(hub, exist_ok=True)
    archive = os.path.join(hub, f"{ref.replace('/', '_')}.zip")
    url = f"https://github.com/{owner}/{name}/zipball/{ref}"
    if verbose:
        sys.stderr.write(f'Downloading: "{url}" to {archive}\n')
    download_url_to_file(url, archive, progress=False)
    with zipfile.ZipFile(archive) as zf:
        top = zf.namelist()[0].split("/")[0]
        unpack = tempfile.mkdtemp(prefix=".unpack-", dir=hub)
        zf.extractall(unpack)
    os.remove(archive)
    if os.path.isdir(target):
        shutil.rmtree(target)
    os.replace(os.path.join(unpack, top), target)
    shutil.rmtree(unpack)
    return target


def _repo_dir(repo_or_dir, source, force_reload, trust_repo, verbose):
    if source not in ("github", "local"):
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    if source == "local":
        return os.path.expanduser(os.fspath(repo_or_dir))
    return _github_dir(repo_or_dir, force_reload, trust_repo, verbose)


def list(github, force_reload=False, skip_validation=False, trust_repo="check", verbose=True, *,  # noqa: A001
         source="github"):
    """The entrypoints (public callables) a repository's ``hubconf.py`` offers.

    Examples
    --------
    >>> import lucid, os, tempfile
    >>> repo = tempfile.mkdtemp()
    >>> with open(os.path.join(repo, "hubconf.py"), "w") as f:
    ...     _ = f.write("def tiny(width=2):\\n    import lucid\\n    return lucid.nn.Linear(2, width)\\n")
    >>> lucid.hub.list(repo, source="local"), lucid.hub.load(repo, "tiny", source="local", width=3)
    (['tiny'], Linear(in_features=2, out_features=3, bias=True))
    """
    module = _import_hubconf(_repo_dir(github, source, force_reload, trust_repo, verbose))
    return [name for name in dir(module) if callable(getattr(module, name)) and not name.startswith("_")]


def help(github, model, force_reload=False, skip_validation=False, trust_repo="check", *,  # noqa: A001
         source="github"):
    """The docstring of entrypoint ``model``."""
    module = _import_hubconf(_repo_dir(github, source, force_reload, trust_repo, False))
    return _entrypoint(module, model).__doc__


def load(repo_or_dir, model, *args, source="github", trust_repo="check", force_reload=False, verbose=True,
         skip_validation=False, **kwargs):
    """``model(*args, **kwargs)`` from the repository's ``hubconf.py`` (see NOTE [Hub])."""
    module = _import_hubconf(_repo_dir(repo_or_dir, source, force_reload, trust_repo, verbose))
    return _entrypoint(module, model)(*args, **kwargs)
