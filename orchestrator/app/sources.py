"""Model sources fetched by url: where a verified download lives, the digest it is keyed by, the download itself.

A ``models[].source: {url, sha256}`` model is keyed by its pin (``"sha256:" + pin``, what hashing the file gives:
url sources are single-file ONNX, no external data), so ``plan`` never downloads. ``build`` and ``gate`` fetch the
models their cells need first, in the main process (``fetch_models``): through fsspec and its filesystem
packages (https: aiohttp; s3://: s3fs; gs://: gcsfs; hf://: huggingface_hub), the optional extras ``fetch``,
``s3``, ``gcs`` and ``hf``. fsspec is imported here only, when a download is due.

The download streams to ``<cache root>/models/sha256/<pin>/<name>.partial``, resumes a partial left by an
interrupted run (a ranged read from its size; a server that ignores ranges is read again from the start), is
checked against the pin and renamed into place: the content-addressed file is always a verified one, and a
second run finds it and downloads nothing. A download whose sha256 is not the pin is removed and raises a
``BuildError`` naming the manifest line (``SourceModel.where``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal

from filelock import FileLock
from rich.console import Console
from rich.file_proxy import FileProxy
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

from orchestrator.atomic import fsync_dir
from orchestrator.core.model import Manifest, Model, SourceModel
from orchestrator.digests import DigestCache, external_data_files, hash_file
from orchestrator.errors import BuildError
from orchestrator.manifest.convert import URL_SCHEMES, source_url_basename, source_url_problem

CHUNK = 4 * 1024 * 1024
# the extra that brings the fsspec filesystem of each scheme (pyproject.toml)
EXTRA_OF_SCHEME = {"https": "fetch", "http": "fetch", "s3": "s3", "gs": "gcs", "hf": "hf"}
_STREAMED = ("http", "https")  # fsspec's HTTP file reads ranges per block: a fresh download streams one GET

FetchKind = Literal["cached", "start", "progress", "done", "failed"]


@dataclass(frozen=True)
class FetchEvent:
    """What a download is doing: ``start`` (``done`` bytes already there when resumed), ``progress``, ``done``
    (verified and in place), ``cached`` (present and verified: nothing downloaded), ``failed`` (the error that
    follows says why)."""

    url: str
    kind: FetchKind
    name: str = ""
    done: int = 0
    total: int | None = None


FetchProgress = Callable[[FetchEvent], None]


def no_progress(event: FetchEvent) -> None:
    return None


# --- where a url model lives, and its key ------------------------------------------------------------------------

def content_path(source: SourceModel, cache_root: Path) -> Path:
    """``<cache root>/models/sha256/<pin>/<file name from the url>``: the verified download of a url source."""
    if source.url is None or source.sha256 is None:
        raise ValueError("content_path is for url sources pinned by sha256")
    return cache_root / "models" / "sha256" / source.sha256 / source_url_basename(source.url)


def pinned_digest(source: SourceModel) -> str:
    """The model digest of a url source without its bytes: the pin, in ``DigestCache.model_digest``'s form (a
    single-file model's digest is the file's ``sha256:<hex>``)."""
    if source.sha256 is None:
        raise ValueError("a url source is pinned by sha256 (the manifest loader refuses one without)")
    return "sha256:" + source.sha256


def model_digest(model: Model, cache: DigestCache) -> str:
    """The digest a model is keyed by: a url source's pin (no download), else the file's content digest."""
    if model.source.url is not None:
        return pinned_digest(model.source)
    return cache.model_digest(model.source.path, name=model.name)


def localize(manifests: Sequence[Manifest], cache_root: Path) -> tuple[Manifest, ...]:
    """The manifests with every url source's ``path`` set to its content-addressed place under ``cache_root``."""
    def located(model: Model) -> Model:
        if model.source.url is None:
            return model
        return replace(model, source=replace(model.source, path=str(content_path(model.source, cache_root))))

    return tuple(replace(man, models=tuple(located(m) for m in man.models))
                 if any(m.source.url is not None for m in man.models) else man for man in manifests)


# --- fetching ------------------------------------------------------------------------------------------------------

def fetch_models(models: Iterable[Model], cache_root: Path, *, progress: FetchProgress = no_progress) -> list[Path]:
    """Fetch (or find, verified) every url model among ``models``; path sources are left alone."""
    out: list[Path] = []
    seen: set[str] = set()
    for model in models:
        if model.source.url is None or model.source.path in seen:
            continue
        seen.add(model.source.path)
        out.append(fetch_model(model.source, cache_root, progress=progress, name=model.name))
    return out


def fetch_model(source: SourceModel, cache_root: Path, *, progress: FetchProgress = no_progress,
                name: str | None = None) -> Path:
    """The verified local file of a url source: found in the cache, else downloaded (resumed), checked against
    the pin and moved into place. Raises ``BuildError`` (naming ``source.where``) for what the user must fix."""
    url = source.url
    if url is None:
        return Path(source.path)
    where = _where(source, name)
    problem = source_url_problem(url)
    if problem is not None:
        raise BuildError(f"{where}: {problem[0]}", hint=problem[1])
    try:
        return _fetch_locked(source, url, cache_root, progress, name, where)
    except BaseException:
        progress(FetchEvent(url, "failed", name or ""))
        raise


def _fetch_locked(source: SourceModel, url: str, cache_root: Path, progress: FetchProgress, name: str | None,
                  where: str) -> Path:
    final = content_path(source, cache_root)
    pin = pinned_digest(source)
    (cache_root / "locks").mkdir(parents=True, exist_ok=True)
    # two runs sharing a cache (parallel CI jobs on one runner) fetch a model once; the second finds it in place
    with FileLock(str(cache_root / "locks" / f"model-{source.sha256}.lock")):
        if final.exists():
            cache = DigestCache.open(cache_root / "digests.json")  # stat-keyed: an unchanged file is not re-read
            try:
                found = cache.model_digest(str(final), name=name)
            except BuildError:
                found = ""
            cache.save()
            if found == pin:
                progress(FetchEvent(url, "cached", name or "", final.stat().st_size, final.stat().st_size))
                return final
            final.unlink()  # changed on disk since it was verified: fetch it again
        partial = final.with_name(final.name + ".partial")
        resumed = partial.exists() and partial.stat().st_size > 0
        _download(url, partial, progress, name or "", where)
        digest, maybe_external = hash_file(str(partial), scan_external=True, regular_only=True)
        if digest != pin and resumed:
            # the kept bytes may be of an older file at that url: one clean download decides
            partial.unlink()
            _download(url, partial, progress, name or "", where)
            digest, maybe_external = hash_file(str(partial), scan_external=True, regular_only=True)
        if digest != pin:
            _discard(partial)
            raise BuildError(f"{where}: the download of {url} has sha256 {digest.split(':', 1)[1]}, the manifest "
                             f"pins {source.sha256}",
                             hint="if the model at that url changed on purpose, pin the new file's sha256 "
                                  "(`sha256sum` of it); otherwise point the url at the file you pinned")
        if maybe_external:
            _refuse_external_data(partial, url, where)
        os.replace(partial, final)
        fsync_dir(final.parent)
    progress(FetchEvent(url, "done", name or "", final.stat().st_size, final.stat().st_size))
    return final


def _where(source: SourceModel, name: str | None) -> str:
    label = f"models[{name}].source" if name else "source"
    return f"{source.where}: {label}" if source.where else label


def _discard(partial: Path) -> None:
    """Nothing half-written stays: the partial file and the content folder it was going to fill."""
    partial.unlink(missing_ok=True)
    try:
        partial.parent.rmdir()
    except OSError:
        pass  # another file of that content is there (a second name for the same bytes)


def _refuse_external_data(partial: Path, url: str, where: str) -> None:
    try:
        files = external_data_files(str(partial))
        why = f"references external data ({', '.join(os.path.basename(f) for f in files)})" if files else ""
    except BuildError as e:
        why = f"references external data that is not there ({e.message})"
    if why:
        _discard(partial)
        raise BuildError(f"{where}: the download of {url} {why}; a url source must be a single-file ONNX model",
                         hint="embed the weights (onnx.save(onnx.load(PATH), OUT), models under 2 GB) and pin "
                              "that file, or keep the model and its data files as a path source")


def _filesystem(url: str, where: str) -> tuple[Any, str]:
    scheme = url.split("://", 1)[0].lower()
    install = f"pip install 'trt-orchestrator[{EXTRA_OF_SCHEME.get(scheme, 'fetch')}]'"
    try:
        import fsspec  # noqa: PLC0415  (optional extra: only a run that downloads needs it)
    except ImportError:
        raise BuildError(f"{where}: fetching {url} needs fsspec, which is not installed", hint=install) from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as e:  # fsspec names the missing filesystem package (s3fs, gcsfs, aiohttp, ...)
        raise BuildError(f"{where}: fetching {url} needs a package that is not installed: {e}", hint=install) \
            from None
    return fs, str(path)


def _download(url: str, partial: Path, progress: FetchProgress, name: str, where: str) -> None:
    """Stream ``url`` into ``partial``, continuing after the bytes already there where the server can."""
    fs, path = _filesystem(url, where)
    offset = partial.stat().st_size if partial.exists() else 0
    try:
        _fetch(fs, path, url, partial, offset, progress, name)
    except BaseException as e:
        if not partial.exists() or partial.stat().st_size == 0:
            _discard(partial)  # nothing came: no empty file or folder stays behind (bytes that came stay, to resume)
        if isinstance(e, FileNotFoundError):
            raise BuildError(f"{where}: {url} was not found",
                             hint="check the url (and that the file is public, or that this runner has credentials "
                                  "for it)") from None
        if isinstance(e, Exception) and not isinstance(e, BuildError):
            # the foreign failures of fsspec's filesystems (aiohttp, botocore, google-auth, huggingface_hub)
            raise BuildError(f"{where}: downloading {url} failed: {type(e).__name__}: {e}",
                             hint="run the command again: the download resumes where it stopped") from None
        raise


def _fetch(fs: Any, path: str, url: str, partial: Path, offset: int, progress: FetchProgress, name: str) -> None:
    if offset:
        try:
            _copy(fs, path, url, partial, offset, progress, name, streamed=False)
            return
        except _NoRanges:
            partial.unlink()  # the server cannot continue it: start over, cleanly
    _copy(fs, path, url, partial, 0, progress, name, streamed=url.split("://", 1)[0].lower() in _STREAMED)


class _NoRanges(Exception):
    """The server answered a ranged read with the whole file (or cannot seek)."""


def _copy(fs: Any, path: str, url: str, partial: Path, offset: int, progress: FetchProgress, name: str, *,
          streamed: bool) -> None:
    # block_size=0 makes fsspec's HTTP file one streamed GET; a resumed one reads ranges of CHUNK bytes, never
    # past the end (then a server that ignored the range cannot pass for one that honoured it: fsspec guesses
    # by the answer's length)
    options: dict[str, Any] = {"block_size": 0} if streamed else {"block_size": CHUNK, "cache_type": "none"}
    size = None
    if streamed:  # a streamed HTTP file knows no size: ask first (the open then asks no second time)
        size = _size(fs.info(path))
        options["size"] = size
    with fs.open(path, "rb", **options) as src:
        total = _size(src) if size is None else size
        if offset and total is not None and offset >= total:
            if offset == total:
                progress(FetchEvent(url, "start", name, offset, total))
                return  # complete already: the pin decides
            raise _NoRanges
        if offset:
            try:
                src.seek(offset)
            except (ValueError, OSError, NotImplementedError):
                raise _NoRanges from None
        progress(FetchEvent(url, "start", name, offset, total))
        done = offset
        partial.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "r+b" if offset else "wb") as out:
            out.seek(offset)
            out.truncate()
            while True:
                want = CHUNK if total is None else min(CHUNK, total - done)
                if want <= 0:
                    break
                try:
                    chunk = src.read(want)
                except ValueError as e:
                    if offset and "range" in str(e).lower():
                        raise _NoRanges from None
                    raise
                if not chunk:
                    break
                out.write(chunk)
                done += len(chunk)
                progress(FetchEvent(url, "progress", name, done, total))
            out.flush()
            os.fsync(out.fileno())


def _size(src: Any) -> int | None:
    """The size a file object (``.size``) or an fsspec info mapping (``["size"]``) gives, if any."""
    size = src.get("size") if isinstance(src, dict) else getattr(src, "size", None)
    return int(size) if isinstance(size, int) and size >= 0 else None


# --- showing progress ----------------------------------------------------------------------------------------------

def terminal_progress(stream: IO[str] | None = None) -> FetchProgress:
    """A rich progress bar on a terminal, else one line when a download starts and one when it is verified.
    While a rich live display owns the terminal (the CLI's node view: it swaps sys.stderr for a ``FileProxy``),
    lines too, which that proxy prints above the view: two live displays on one terminal overwrite each other."""
    out = stream or sys.stderr
    if out.isatty() and not isinstance(out, FileProxy):
        return _RichProgress(out)
    return _LineProgress(out)


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1024 * 1024):.1f} MiB"


class _LineProgress:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.started: dict[str, float] = {}

    def __call__(self, event: FetchEvent) -> None:
        who = f"model {event.name}: " if event.name else ""
        if event.kind == "start":
            self.started[event.url] = time.monotonic()
            resumed = f", resuming at {_mib(event.done)}" if event.done else ""
            print(f"{who}fetching {event.url} ({_mib(event.total)}{resumed})", file=self.out, flush=True)
        elif event.kind == "done":
            took = time.monotonic() - self.started.pop(event.url, time.monotonic())
            print(f"{who}fetched {_mib(event.done)} in {took:.1f} s, sha256 verified", file=self.out, flush=True)


class _RichProgress:
    def __init__(self, out: IO[str]) -> None:
        self.console = Console(file=out)
        self.bar: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, event: FetchEvent) -> None:
        if event.kind == "cached":
            return
        if self.bar is None:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), console=self.console, transient=False)
            self.bar.start()
        if event.kind == "start" and event.url not in self.tasks:
            self.tasks[event.url] = self.bar.add_task(f"fetch {event.name or event.url}", total=event.total,
                                                      completed=event.done)
        elif event.kind == "progress" and event.url in self.tasks:
            self.bar.update(self.tasks[event.url], completed=event.done)
        elif event.kind in ("done", "failed"):
            task = self.tasks.pop(event.url, None)
            if task is not None and event.kind == "done":
                self.bar.update(task, completed=event.done, description=f"fetched {event.name or event.url} "
                                                                        "(sha256 verified)")
            if not self.tasks:
                self.bar.stop()
                self.bar = None


# --- Git LFS -------------------------------------------------------------------------------------------------------

def lfs_tracked(paths: Sequence[str], repo_root: str | os.PathLike[str]) -> list[str]:
    """The ``paths`` whose git ``filter`` attribute is ``lfs`` (CI must check them out with LFS); [] without git
    or outside a repository."""
    if not paths or shutil.which("git") is None:
        return []
    root = os.path.abspath(repo_root)
    # git refuses the whole call for a path outside the repository: ask for the others, relative to its root
    relative = {p: os.path.relpath(p, root) if os.path.isabs(p) else p for p in paths}
    asked = {p: r for p, r in relative.items() if r != ".." and not r.startswith(".." + os.sep)}
    if not asked:
        return []
    try:
        proc = subprocess.run(["git", "check-attr", "-z", "filter", "--", *asked.values()], cwd=root,
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    # -z: path NUL attribute NUL value NUL, repeated
    fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    tracked = {fields[i] for i in range(0, len(fields) - 2, 3) if fields[i + 2] == "lfs"}
    return [p for p, a in asked.items() if a in tracked]


__all__ = ["CHUNK", "EXTRA_OF_SCHEME", "URL_SCHEMES", "FetchEvent", "FetchProgress", "content_path", "fetch_model",
           "fetch_models", "lfs_tracked", "localize", "model_digest", "no_progress", "pinned_digest",
           "terminal_progress"]
