"""``ragbot index PATH...``: a folder of files (GenericChatBot's ``refs/``) kept in the index.

Only files whose content changed are parsed and embedded again; files that are gone (or newly
ignored) are deleted from the store. A JSON manifest remembers, per file, its content hash, page id
and revision, and is saved after every file, so an interrupted run loses nothing.

- **Walking**: a folder is walked in sorted order without following symlinked folders; names that
  start with ``.`` are skipped (``.git``, the ignore files themselves); only the supported
  extensions (``ragbot.sources.detect.SUPPORTED_EXTENSIONS``) are taken, and each is then parsed
  by its content. A file named on the command line is taken whatever its extension.
- **Ignore files**: ``.ragbotignore`` and ``.refignore`` in any folder, with .gitignore syntax
  (pathspec's gitwildmatch), relative to the folder that holds them; deeper files override
  shallower ones, and an ignored folder is not entered.
- **Keys**: ``<folder name>/<path inside it>`` for files found in a folder (so two checkouts of the
  same folder share keys), the file name for a file argument. The key is the page's ``url``.
- **Page ids**: ``FILE_PAGE_ID_BASE + slot``, the slot taken from the SHA-256 of the key modulo
  ``FILE_PAGE_ID_SLOTS`` (2**30 .. 2**30 + 2**16). MediaWiki page ids stay far below 2**30, so file
  pages never meet wiki pages; ids stay below 2**31 (an Elasticsearch ``integer``); and the narrow
  range keeps Elasticsearch's buckets of 1000 page ids to at most 66 indices. When two keys fall on
  one slot the later key (in sorted order) takes the next free one, and the manifest keeps it.
- **Revision ids**: the first 28 bits of the content's SHA-256, plus one: the same bytes give the
  same revision and the same paragraph ids, so a repeated run rewrites nothing.
- **Safety**: unchanged files are checked against the store (its indexed revision); a page the store
  lost is indexed again. A change of the definition's vector fields or the paragraph budget
  re-embeds everything. A file that cannot be parsed is reported and left as it was indexed before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pathspec
from pydantic import BaseModel, Field, ValidationError

from ragbot.definition import DocumentDefinition
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.indexing.paragraphs import DEFAULT_LINK_TARGETS, DEFAULT_PARAGRAPH_TOKENS, LinkTargets
from ragbot.indexing.pipeline import IndexingHooks, IndexingPipeline, SplitOptions
from ragbot.ports import Embedder, SearchStore
from ragbot.schemas.pages import Page
from ragbot.sources.detect import SUPPORTED_EXTENSIONS
from ragbot.sources.files import parse_upload

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "FILE_PAGE_ID_BASE",
    "FILE_PAGE_ID_SLOTS",
    "IGNORE_FILES",
    "FolderFile",
    "FolderIndexReport",
    "FolderPlan",
    "Manifest",
    "ManifestEntry",
    "Progress",
    "content_revision",
    "file_page_id",
    "index_folder",
    "plan_folder_index",
    "scan_paths",
]

logger = logging.getLogger(__name__)

FILE_PAGE_ID_BASE = 2**30
FILE_PAGE_ID_SLOTS = 2**16
IGNORE_FILES = (".ragbotignore", ".refignore")
DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024

Progress = Callable[[int, int, str], None]
"""Called after each file: (files done, files to do, key)."""


class ManifestEntry(BaseModel):
    """What was indexed for one file."""

    sha256: str
    page_id: int
    revision_id: int
    paragraphs: int = 0
    indexed_at: datetime | None = None


class Manifest(BaseModel):
    """Every indexed file by key, and the fingerprint of the definition it was embedded with."""

    version: Literal[1] = 1
    fingerprint: str = ""
    files: dict[str, ManifestEntry] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        """The manifest at ``path``, or an empty one when there is none yet."""
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the index manifest {path}: {exc}") from None
        try:
            return cls.model_validate_json(raw)
        except ValidationError as exc:
            raise ConfigurationError(
                f"the index manifest {path} is not valid ({exc.error_count()} errors); "
                "delete it to re-index everything"
            ) from None

    def save(self, path: Path) -> None:
        """Write atomically (temporary file, then rename), so a crash never leaves half a manifest."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        os.replace(temporary, path)


@dataclass(frozen=True, slots=True)
class FolderFile:
    """A file to index: its key (the page's url) and where it is."""

    key: str
    path: Path


@dataclass(slots=True)
class FolderPlan:
    """What a run will do: pages to (re)index, page ids to delete, keys left as they are."""

    to_index: list[Page] = field(default_factory=list)
    to_delete: list[int] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    deleted_keys: list[str] = field(default_factory=list)
    entries: dict[str, ManifestEntry] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as ``(to_index, to_delete, unchanged)``, the agreed shape of a plan."""
        return iter((self.to_index, self.to_delete, self.unchanged))


@dataclass(slots=True)
class FolderIndexReport:
    """What a run did, by key."""

    indexed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    paragraphs: int = 0


def content_revision(digest: str) -> int:
    """A revision id from a content hash: its first 28 bits plus one (positive, fits everywhere)."""
    return int(digest[:7], 16) + 1


def file_page_id(key: str, *, taken: Collection[int]) -> int:
    """The page id of a key: its hash's slot above ``FILE_PAGE_ID_BASE``, or the next free one."""
    slot = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % FILE_PAGE_ID_SLOTS
    for step in range(FILE_PAGE_ID_SLOTS):
        page_id = FILE_PAGE_ID_BASE + (slot + step) % FILE_PAGE_ID_SLOTS
        if page_id not in taken:
            return page_id
    raise ValidationFailed(f"more than {FILE_PAGE_ID_SLOTS} files to index", field="paths")


# --- walking ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _IgnoreRules:
    """The ignore files met on the way down, each with the folder (relative to the root) it sits in."""

    specs: list[tuple[str, pathspec.GitIgnoreSpec]] = field(default_factory=list)

    def with_folder(self, folder: Path, relative: str) -> _IgnoreRules:
        lines: list[str] = []
        for name in IGNORE_FILES:
            try:
                lines.extend((folder / name).read_text(encoding="utf-8", errors="replace").splitlines())
            except FileNotFoundError:
                continue
            except OSError as exc:
                logger.warning("cannot read %s: %s", folder / name, exc)
        if not lines:
            return self
        return _IgnoreRules([*self.specs, (relative, pathspec.GitIgnoreSpec.from_lines(lines))])

    def ignored(self, relative: str, *, is_dir: bool) -> bool:
        verdict = False
        for base, spec in self.specs:
            inside = relative[len(base) + 1 :] if base else relative
            result = spec.check_file(inside + "/" if is_dir else inside)
            if result.include is not None:
                verdict = bool(result.include)
        return verdict


def scan_paths(paths: Sequence[Path]) -> tuple[list[FolderFile], list[str]]:
    """The files under ``paths`` by key, and the key prefixes whose missing files count as deleted."""
    files: dict[str, FolderFile] = {}
    scopes: list[str] = []
    for given in paths:
        found: Iterator[tuple[str, Path]]
        if given.is_dir():
            root = given.resolve()
            prefix = root.name or "root"
            scopes.append(f"{prefix}/")
            found = ((f"{prefix}/{rel}", path) for rel, path in _walk(root))
        elif given.is_file():
            found = iter([(given.name, given)])
            scopes.append(given.name)
        else:
            raise ValidationFailed(f"{given}: no such file or folder", field="paths")
        for key, path in found:
            if key in files and files[key].path.resolve() != path.resolve():
                raise ValidationFailed(
                    f"{files[key].path} and {path} would both be indexed as {key!r}; index them separately",
                    field="paths",
                )
            files[key] = FolderFile(key=key, path=path)
    return [files[k] for k in sorted(files)], scopes


def _walk(root: Path) -> Iterator[tuple[str, Path]]:
    """(path relative to root, path) of each supported, not ignored, not hidden file, sorted."""
    rules: dict[str, _IgnoreRules] = {"": _IgnoreRules().with_folder(root, "")}
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        relative = here.relative_to(root).as_posix()
        relative = "" if relative == "." else relative
        current = rules.pop(relative)
        kept: list[str] = []
        for name in sorted(dirs):
            child = f"{relative}/{name}" if relative else name
            if name.startswith(".") or current.ignored(child, is_dir=True):
                continue
            kept.append(name)
            rules[child] = current.with_folder(here / name, child)
        dirs[:] = kept
        for name in sorted(names):
            child = f"{relative}/{name}" if relative else name
            path = here / name
            if (
                name.startswith(".")
                or Path(name).suffix.lower() not in SUPPORTED_EXTENSIONS
                or current.ignored(child, is_dir=False)
                or not path.is_file()
            ):
                continue
            yield child, path


# --- planning and indexing --------------------------------------------------------------------------


def plan_folder_index(
    paths: Sequence[Path],
    *,
    manifest: Manifest,
    force: bool = False,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> FolderPlan:
    """Parse the files that are new or changed since the manifest; list the ones gone."""
    files, scopes = scan_paths(paths)
    plan = FolderPlan()
    present = {f.key for f in files}
    for key in sorted(manifest.files):
        if key not in present and any(key == s or (s.endswith("/") and key.startswith(s)) for s in scopes):
            plan.to_delete.append(manifest.files[key].page_id)
            plan.deleted_keys.append(key)
    taken = {e.page_id for e in manifest.files.values()}  # a deleted file's id is not reused this run
    for item in files:
        try:
            size = item.path.stat().st_size
            if size > max_bytes:
                plan.failed[item.key] = f"the file is {size} bytes, over the {max_bytes}-byte limit"
                continue
            data = item.path.read_bytes()
        except OSError as exc:
            plan.failed[item.key] = f"cannot read: {exc}"
            continue
        digest = hashlib.sha256(data).hexdigest()
        known = manifest.files.get(item.key)
        if known is not None and known.sha256 == digest and not force:
            plan.unchanged.append(item.key)
            continue
        page_id = known.page_id if known is not None else file_page_id(item.key, taken=taken)
        taken.add(page_id)
        revision_id = content_revision(digest)
        try:
            page = parse_upload(
                data,
                filename=item.path.name,
                max_bytes=max_bytes,
                page_id=page_id,
                revision_id=revision_id,
                revision_date=datetime.fromtimestamp(item.path.stat().st_mtime, tz=UTC),
                url=item.key,
                source="file",
            )
        except ValidationFailed as exc:
            plan.failed[item.key] = str(exc)
            if known is None:
                taken.discard(page_id)
            continue
        page.extra["path"] = item.key
        plan.to_index.append(page)
        plan.entries[item.key] = ManifestEntry(sha256=digest, page_id=page_id, revision_id=revision_id)
    return plan


def definition_fingerprint(
    definition: DocumentDefinition, *, max_tokens: int, link_targets: LinkTargets = DEFAULT_LINK_TARGETS
) -> str:
    """What the paragraphs depend on besides the file: the vector fields and the split options."""
    names = sorted(v.name for v in definition.vector_fields)
    raw = json.dumps({"vectors": names, "max_tokens": max_tokens, "links": link_targets}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


async def index_folder(
    paths: Sequence[Path],
    *,
    store: SearchStore,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    manifest_path: Path,
    progress: Progress | None = None,
    max_tokens: int = DEFAULT_PARAGRAPH_TOKENS,
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    force: bool = False,
    verify: bool = True,
) -> FolderIndexReport:
    """Bring the store in line with the files: index new and changed ones, delete the ones gone."""
    manifest = Manifest.load(manifest_path)
    fingerprint = definition_fingerprint(definition, max_tokens=max_tokens, link_targets=link_targets)
    if manifest.files and manifest.fingerprint != fingerprint:
        logger.info("the definition or paragraph budget changed since the last run: re-embedding all files")
        force = True
    manifest.fingerprint = fingerprint
    if verify:
        await _forget_what_the_store_lost(manifest, store=store)
    plan = plan_folder_index(paths, manifest=manifest, force=force, max_bytes=max_bytes)
    report = FolderIndexReport(unchanged=list(plan.unchanged), failed=dict(plan.failed))
    for key, reason in plan.failed.items():
        logger.warning("not indexed: %s: %s", key, reason)
    total = len(plan.deleted_keys) + len(plan.to_index)
    done = 0
    for key in plan.deleted_keys:
        await store.delete_page(page_id=manifest.files[key].page_id)
        del manifest.files[key]
        manifest.save(manifest_path)
        report.deleted.append(key)
        done += 1
        if progress is not None:
            progress(done, total, key)
    # Files go through the indexing pipeline a group at a time (shared embedding batches across
    # files); each written file is recorded in the manifest file at once (``_ManifestHooks``).
    pipeline = IndexingPipeline(
        definition=definition,
        embedders=embedders,
        split=SplitOptions(max_tokens=max_tokens, link_targets=link_targets),
    )
    hooks = _ManifestHooks(
        manifest=manifest,
        manifest_path=manifest_path,
        plan=plan,
        report=report,
        progress=progress,
        done=done,
        total=total,
    )
    for group in _groups(plan.to_index):
        await pipeline.index(group, store=store, hooks=hooks)
    if not plan.deleted_keys and not plan.to_index:
        manifest.save(manifest_path)
    return report


class _ManifestHooks(IndexingHooks):
    """After each file is written: its manifest entry (saved at once), the report and progress."""

    def __init__(
        self,
        *,
        manifest: Manifest,
        manifest_path: Path,
        plan: FolderPlan,
        report: FolderIndexReport,
        progress: Progress | None,
        done: int,
        total: int,
    ) -> None:
        self.manifest, self.manifest_path, self.plan, self.report = manifest, manifest_path, plan, report
        self.progress, self.done, self.total = progress, done, total

    async def written(self, page: Page, paragraphs: int) -> None:
        key = page.url or ""
        self.manifest.files[key] = self.plan.entries[key].model_copy(
            update={"paragraphs": paragraphs, "indexed_at": datetime.now(UTC)}
        )
        self.manifest.save(self.manifest_path)
        self.report.indexed.append(key)
        self.report.paragraphs += paragraphs
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, key)


_GROUP_PAGES = 32
_GROUP_CHARS = 2_000_000


def _groups(pages: Sequence[Page]) -> Iterator[list[Page]]:
    """Consecutive pages embedded together: at most 32 files or 2 M characters (one big file alone)."""
    group: list[Page] = []
    chars = 0
    for page in pages:
        if group and (len(group) >= _GROUP_PAGES or chars + len(page.content) > _GROUP_CHARS):
            yield group
            group, chars = [], 0
        group.append(page)
        chars += len(page.content)
    if group:
        yield group


async def _forget_what_the_store_lost(manifest: Manifest, *, store: SearchStore) -> None:
    """Mark entries whose revision the store does not hold, so they are indexed again."""
    for key, entry in manifest.files.items():
        state = await store.page_state(page_id=entry.page_id)
        if state is None or state.revision_id != entry.revision_id:
            logger.info("%s: the store does not hold revision %d; indexing it again", key, entry.revision_id)
            manifest.files[key] = entry.model_copy(update={"sha256": ""})
