"""``ragbot index PATH...``: index a folder of documents, re-embedding only the files that changed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger("ragbot.cli.main")

DEFAULT_MANIFEST = Path("var/folder-index.json")


def register(subparsers: Any) -> None:
    """Add ``index`` to the ``ragbot`` parser."""
    from ragbot.indexing.folder import DEFAULT_MAX_FILE_BYTES, IGNORE_FILES

    parser = subparsers.add_parser(
        "index",
        help="index folders of pdf, docx, pptx, html, md and txt files (only what changed)",
        description="Walk each PATH (a folder or a file), honour "
        + " and ".join(IGNORE_FILES)
        + " (.gitignore syntax), parse every supported file, embed the new and changed ones into the "
        "configured store's live index generation and delete the ones that are gone. A manifest remembers "
        "what was indexed.",
    )
    add = parser.add_argument
    add("paths", nargs="+", type=Path, metavar="PATH", help="folders or files to index")
    add("--manifest", type=Path, default=DEFAULT_MANIFEST, help=f"default: {DEFAULT_MANIFEST}")
    add("--force", action="store_true", help="re-embed every file, changed or not")
    add("--dry-run", action="store_true", help="only say what would be indexed and deleted")
    add("--definition", type=Path, help="document definition (default: RAGBOT_DOCUMENT_DEFINITION)")
    add("--store", choices=["embedded", "elasticsearch"], help="default: RAGBOT_STORE_BACKEND")
    add("--store-path", type=Path, help="embedded store file (default: RAGBOT_STORE_EMBEDDED_PATH)")
    add("--es-url", help="Elasticsearch URL (default: RAGBOT_STORE_ES_URL)")
    add("--index-prefix", help="Elasticsearch index prefix (default: RAGBOT_STORE_ES_INDEX_PREFIX)")
    add("--max-bytes", type=int, default=DEFAULT_MAX_FILE_BYTES, help="largest file to index, in bytes")
    add("--paragraph-tokens", type=int, help="default: RAGBOT_WORKER_PARAGRAPH_TOKENS")
    add("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_index)


def run_index(args: argparse.Namespace) -> int:
    """``ragbot index``: 0 when every file is in the index, 1 when some could not be indexed."""
    if args.dry_run:
        return _dry_run(args)
    return asyncio.run(_index(args))


def _dry_run(args: argparse.Namespace) -> int:
    from ragbot.indexing.folder import Manifest, plan_folder_index

    plan = plan_folder_index(
        args.paths, manifest=Manifest.load(args.manifest), force=args.force, max_bytes=args.max_bytes
    )
    for page in plan.to_index:
        sys.stdout.write(f"index   {page.url}\n")
    for key in plan.deleted_keys:
        sys.stdout.write(f"delete  {key}\n")
    for key, reason in plan.failed.items():
        sys.stdout.write(f"fail    {key}: {reason}\n")
    sys.stdout.write(
        f"{len(plan.to_index)} to index, {len(plan.deleted_keys)} to delete, "
        f"{len(plan.unchanged)} unchanged, {len(plan.failed)} failed\n"
    )
    return 1 if plan.failed else 0


async def _index(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ragbot.definition import load_definition
    from ragbot.embedders import build_embedders
    from ragbot.indexing.folder import index_folder
    from ragbot.settings import get_model_settings, get_store_settings, get_worker_settings
    from ragbot.stores import build_store
    from ragbot.stores.generations import read_live, settings_for, stores_what

    model_settings = get_model_settings()
    definition = load_definition(args.definition or model_settings.document_definition)
    updates: dict[str, Any] = {}
    for option, name in (
        ("store", "backend"),
        ("store_path", "embedded_path"),
        ("es_url", "es_url"),
        ("index_prefix", "es_index_prefix"),
    ):
        if getattr(args, option) is not None:
            updates[name] = getattr(args, option)
    store_settings = get_store_settings().model_copy(update=updates)
    live = await read_live(store_settings)
    if not stores_what(live, definition):
        sys.stderr.write(
            f"ragbot index: the live index generation {live.generation_id} stores other fields or "
            "models than the definition file; run `ragbot reembed` first, or give --definition with "
            "the live generation's\n"
        )
        return 2
    embedders = build_embedders(settings=model_settings, definition=definition)
    logger.info("loading models %s", list(embedders))
    for embedder in embedders.values():
        await asyncio.to_thread(embedder.warm_up)
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(
        settings=settings_for(store_settings, live.generation_id),
        definition=definition,
        dimensions=dimensions,
    )
    logger.info("writing index generation %s", live.generation_id)
    bar = tqdm(total=0, unit="file", disable=args.no_progress, file=sys.stderr)

    def progress(done: int, total: int, key: str) -> None:
        bar.total = total
        bar.update(done - bar.n)
        bar.set_postfix_str(key[-48:], refresh=True)

    worker_settings = get_worker_settings()
    try:
        await store.ensure_ready()
        report = await index_folder(
            args.paths,
            store=store,
            definition=definition,
            embedders=embedders,
            manifest_path=args.manifest,
            progress=progress,
            max_tokens=args.paragraph_tokens or worker_settings.paragraph_tokens,
            link_targets=worker_settings.link_targets,  # what the worker stores, stored here too
            max_bytes=args.max_bytes,
            force=args.force,
        )
    finally:
        bar.close()
        await store.close()
        for embedder in embedders.values():
            embedder.close()
    for key, reason in report.failed.items():
        sys.stdout.write(f"not indexed: {key}: {reason}\n")
    sys.stdout.write(
        f"indexed {len(report.indexed)} files ({report.paragraphs} paragraphs), "
        f"deleted {len(report.deleted)}, unchanged {len(report.unchanged)}, failed {len(report.failed)}\n"
    )
    return 1 if report.failed else 0
