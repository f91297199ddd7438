"""``ragbot index PATH...``: ignore files, stable ids, only changed files re-embedded, deletions, the CLI.

The store is the real embedded (SQLite) store in a temporary folder. The embedder is the shared
``HashEmbedder`` (a hashed bag of words) which records every batch it embeds, so a test can say
exactly which files were embedded; one slow test runs MiniLM and searches the result.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from fixtures.files.builders import make_docx, make_pdf, make_pptx
from support.fakes import HashEmbedder

from ragbot.cli.main import main
from ragbot.definition import DocumentDefinition, definition_to_json, parse_definition
from ragbot.errors import ValidationFailed
from ragbot.indexing.folder import (
    FILE_PAGE_ID_BASE,
    FILE_PAGE_ID_SLOTS,
    FolderIndexReport,
    Manifest,
    content_revision,
    file_page_id,
    index_folder,
    plan_folder_index,
    scan_paths,
)
from ragbot.messaging.reembed import generation_of, split_options
from ragbot.ports import Embedder, SearchStore
from ragbot.stores.embedded import EmbeddedStore
from ragbot.stores.embedded.generations import EmbeddedGenerations
from ragbot.stores.generations import embedded_file

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
        "field_for_llm": "content",
        "models": {"hash-model": ["title", "content"]},
    }
)


@pytest.fixture
def refs(tmp_path: Path) -> Path:
    root = tmp_path / "refs"
    (root / "guides").mkdir(parents=True)
    (root / "drafts").mkdir()
    (root / ".git").mkdir()
    (root / "guides" / "leave.md").write_text("# Annual leave\n\nWorkers get twelve days.", encoding="utf-8")
    (root / "guides" / "pay.docx").write_bytes(make_docx())
    (root / "review.pptx").write_bytes(make_pptx())
    (root / "handbook.pdf").write_bytes(make_pdf([["Handbook page one."], ["Handbook page two."]]))
    (root / "notes.txt").write_text("Plain notes about pensions.", encoding="utf-8")
    (root / "drafts" / "secret.md").write_text("# Draft\n\nNot for indexing.", encoding="utf-8")
    (root / "debug.log.txt").write_text("log text", encoding="utf-8")
    (root / "keep.log.txt").write_text("kept despite the pattern", encoding="utf-8")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    (root / ".git" / "config.txt").write_text("hidden", encoding="utf-8")
    (root / ".ragbotignore").write_text("drafts/\n*.log.txt\n!keep.log.txt\n", encoding="utf-8")
    return root


EXPECTED = [
    "refs/guides/leave.md",
    "refs/guides/pay.docx",
    "refs/handbook.pdf",
    "refs/keep.log.txt",
    "refs/notes.txt",
    "refs/review.pptx",
]


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SearchStore]:
    dimensions = {"title_hash-model_vectors": 8, "content_hash-model_vectors": 8}
    embedded = EmbeddedStore(path=tmp_path / "store.sqlite3", definition=DEFINITION, dimensions=dimensions)
    await embedded.ensure_ready()
    yield embedded
    await embedded.close()


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder("hash-model", dimension=8)


async def run(
    refs: Path, *, store: SearchStore, embedder: Embedder, definition: DocumentDefinition = DEFINITION
) -> FolderIndexReport:
    return await index_folder(
        [refs],
        store=store,
        definition=definition,
        embedders={"hash-model": embedder},
        manifest_path=refs.parent / "manifest.json",
        max_tokens=64,
    )


# --- walking and ignore files -----------------------------------------------------------------------


def test_scan_honours_ignore_files_hidden_names_and_extensions(refs: Path) -> None:
    files, scopes = scan_paths([refs])
    assert [f.key for f in files] == EXPECTED
    assert scopes == ["refs/"]


def test_nested_ignore_files_and_refignore_override_shallower_rules(refs: Path) -> None:
    (refs / "guides" / ".refignore").write_text("*.md\n", encoding="utf-8")
    (refs / ".refignore").write_text("!drafts/\n", encoding="utf-8")  # read after .ragbotignore: wins
    keys = [f.key for f in scan_paths([refs])[0]]
    assert "refs/guides/leave.md" not in keys
    assert "refs/drafts/secret.md" in keys


def test_an_ignored_folder_is_not_entered(refs: Path) -> None:
    # As in git: a file inside an excluded folder cannot be re-included.
    (refs / ".ragbotignore").write_text("drafts/\n!drafts/secret.md\n", encoding="utf-8")
    assert "refs/drafts/secret.md" not in [f.key for f in scan_paths([refs])[0]]


def test_a_file_argument_is_taken_whatever_its_name(refs: Path, tmp_path: Path) -> None:
    odd = tmp_path / "LICENSE"
    odd.write_text("Some license text.", encoding="utf-8")
    files, _ = scan_paths([odd])
    assert [(f.key, f.path) for f in files] == [("LICENSE", odd)]
    with pytest.raises(ValidationFailed, match="no such file or folder"):
        scan_paths([tmp_path / "missing"])


# --- ids ----------------------------------------------------------------------------------------------


def test_page_ids_are_stable_in_their_own_range_and_collisions_take_the_next_slot() -> None:
    first = file_page_id("refs/a.pdf", taken=())
    assert first == file_page_id("refs/a.pdf", taken={1, 2, 3})
    assert FILE_PAGE_ID_BASE <= first < FILE_PAGE_ID_BASE + FILE_PAGE_ID_SLOTS < 2**31
    nxt = FILE_PAGE_ID_BASE + (first - FILE_PAGE_ID_BASE + 1) % FILE_PAGE_ID_SLOTS
    assert file_page_id("refs/a.pdf", taken={first}) == nxt
    assert content_revision("0" * 64) == 1
    assert content_revision("f" * 64) == 2**28


def test_plan_parses_every_file_with_ids_and_urls(refs: Path) -> None:
    plan = plan_folder_index([refs], manifest=Manifest())
    assert sorted(p.url or "" for p in plan.to_index) == EXPECTED
    assert plan.to_delete == [] and plan.unchanged == [] and plan.failed == {}
    for page in plan.to_index:
        assert page.source == "file"
        assert page.page_id == file_page_id(page.url or "", taken=())
        assert page.revision_id == plan.entries[page.url or ""].revision_id
    to_index, to_delete, unchanged = plan
    assert (to_index, to_delete, unchanged) == (plan.to_index, [], [])
    pdf = next(p for p in plan.to_index if p.url == "refs/handbook.pdf")
    assert pdf.blocks is not None and [b.location for b in pdf.blocks] == ["page 1", "page 2"]


def test_a_corrupt_file_is_reported_and_the_rest_indexed(refs: Path) -> None:
    (refs / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    plan = plan_folder_index([refs], manifest=Manifest())
    assert list(plan.failed) == ["refs/broken.docx"]
    assert "corrupt" in plan.failed["refs/broken.docx"]
    assert len(plan.to_index) == len(EXPECTED)


def test_a_file_over_the_cap_is_reported_without_being_read(refs: Path) -> None:
    (refs / "huge.txt").write_text("word " * 1000, encoding="utf-8")
    plan = plan_folder_index([refs], manifest=Manifest(), max_bytes=4000)
    assert plan.failed["refs/huge.txt"] == "the file is 5000 bytes, over the 4000-byte limit"
    assert "refs/notes.txt" in [p.url for p in plan.to_index]


# --- indexing -----------------------------------------------------------------------------------------


async def test_second_run_re_embeds_nothing(refs: Path, store: SearchStore, embedder: HashEmbedder) -> None:
    first = await run(refs, store=store, embedder=embedder)
    assert first.indexed == EXPECTED and first.failed == {} and first.paragraphs > len(EXPECTED)
    assert await store.count() == first.paragraphs
    assert "Not for indexing" not in embedder.embedded()
    embedder.passage_calls.clear()

    second = await run(refs, store=store, embedder=embedder)
    assert (second.indexed, second.deleted, second.unchanged) == ([], [], EXPECTED)
    assert embedder.passage_calls == []
    assert await store.count() == first.paragraphs


async def test_a_changed_file_re_embeds_only_that_file(
    refs: Path, store: SearchStore, embedder: HashEmbedder
) -> None:
    await run(refs, store=store, embedder=embedder)
    manifest = Manifest.load(refs.parent / "manifest.json")
    before = manifest.files["refs/notes.txt"]
    embedder.passage_calls.clear()

    (refs / "notes.txt").write_text("Plain notes about pensions, revised for 2025.", encoding="utf-8")
    report = await run(refs, store=store, embedder=embedder)
    assert report.indexed == ["refs/notes.txt"]
    assert "revised for 2025" in embedder.embedded()
    assert "Handbook page one" not in embedder.embedded()

    after = Manifest.load(refs.parent / "manifest.json").files["refs/notes.txt"]
    assert after.page_id == before.page_id and after.revision_id != before.revision_id
    state = await store.page_state(page_id=after.page_id)
    assert state is not None and state.revision_id == after.revision_id
    hits = await store.page_paragraphs(page_id=after.page_id)
    assert [h.source["content"] for h in hits] == ["Plain notes about pensions, revised for 2025."]


async def test_a_deleted_or_newly_ignored_file_is_removed(
    refs: Path, store: SearchStore, embedder: HashEmbedder
) -> None:
    await run(refs, store=store, embedder=embedder)
    files = Manifest.load(refs.parent / "manifest.json").files
    gone, ignored = files["refs/review.pptx"].page_id, files["refs/keep.log.txt"].page_id
    embedder.passage_calls.clear()

    (refs / "review.pptx").unlink()
    (refs / ".ragbotignore").write_text("drafts/\n*.log.txt\n", encoding="utf-8")
    report = await run(refs, store=store, embedder=embedder)
    assert report.deleted == ["refs/keep.log.txt", "refs/review.pptx"] and report.indexed == []
    assert embedder.passage_calls == []
    assert await store.page_state(page_id=gone) is None
    assert await store.page_state(page_id=ignored) is None
    assert set(Manifest.load(refs.parent / "manifest.json").files) == set(EXPECTED) - {
        "refs/keep.log.txt",
        "refs/review.pptx",
    }


async def test_a_page_the_store_lost_is_indexed_again(
    refs: Path, store: SearchStore, embedder: HashEmbedder
) -> None:
    await run(refs, store=store, embedder=embedder)
    lost = Manifest.load(refs.parent / "manifest.json").files["refs/handbook.pdf"].page_id
    await store.delete_page(page_id=lost)
    report = await run(refs, store=store, embedder=embedder)
    assert report.indexed == ["refs/handbook.pdf"]
    assert await store.page_state(page_id=lost) is not None


async def test_a_changed_definition_re_embeds_everything(
    refs: Path, store: SearchStore, embedder: HashEmbedder
) -> None:
    await run(refs, store=store, embedder=embedder)
    narrower = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
            "field_for_llm": "content",
            "models": {"hash-model": ["content"]},
        }
    )
    report = await run(refs, store=store, embedder=embedder, definition=narrower)
    assert report.indexed == EXPECTED


def test_cli_dry_run_lists_the_plan(refs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["index", str(refs), "--dry-run", "--manifest", str(refs.parent / "m.json")])
    out = capsys.readouterr().out
    assert status == 0
    assert "index   refs/handbook.pdf" in out
    assert "6 to index, 0 to delete, 0 unchanged, 0 failed" in out


# --- the real model (slow) ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Iterator[Embedder]:
    from ragbot.embedders import build_embedders
    from ragbot.settings import ModelSettings

    definition = _minilm_definition()
    settings = ModelSettings(models_location=None, device="cpu")
    embedders = build_embedders(settings=settings, definition=definition)
    model = embedders["all-MiniLM-L6-v2"]
    model.warm_up()
    yield model
    model.close()


def _minilm_definition() -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
            "field_for_llm": "content",
            "models": {"all-MiniLM-L6-v2": "content"},
        }
    )


@pytest.mark.slow
async def test_the_cli_indexes_a_folder_with_minilm_and_finds_it(
    refs: Path, tmp_path: Path, minilm: Embedder
) -> None:
    definition = _minilm_definition()
    dimensions = {"content_all-MiniLM-L6-v2_vectors": 384}
    store = EmbeddedStore(path=tmp_path / "minilm.sqlite3", definition=definition, dimensions=dimensions)
    await store.ensure_ready()
    try:
        report = await index_folder(
            [refs],
            store=store,
            definition=definition,
            embedders={minilm.name: minilm},
            manifest_path=tmp_path / "minilm.json",
            max_tokens=256,
        )
        assert report.indexed == EXPECTED
        query = minilm.embed_queries(["How many days of annual leave do workers get?"])[0]
        hits = await store.knn(vector_field="content_all-MiniLM-L6-v2_vectors", vector=query, k=1)
        assert hits[0].source["url"] == "refs/guides/leave.md"
        manifest = json.loads((tmp_path / "minilm.json").read_text(encoding="utf-8"))
        assert manifest["files"]["refs/guides/leave.md"]["paragraphs"] == 1
    finally:
        await store.close()


@pytest.mark.slow
def test_the_cli_writes_the_live_generation_and_refuses_a_definition_it_does_not_store(
    refs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a re-embed switched, ``ragbot index`` writes what readers query, not the legacy file."""
    definition = _minilm_definition()
    dimensions = {"content_all-MiniLM-L6-v2_vectors": 384}
    path = tmp_path / "store.sqlite3"
    live = generation_of(
        definition, dimensions=dimensions, split=split_options(max_tokens=256, link_targets="drop")
    )

    async def switch() -> None:
        generations = EmbeddedGenerations(path=path)
        await generations.record(live)
        await generations.switch(to=live.generation_id)
        await generations.close()

    asyncio.run(switch())
    definition_file = tmp_path / "definition.json"
    definition_file.write_text(json.dumps(definition_to_json(definition)), encoding="utf-8")
    args = ["index", str(refs), "--definition", str(definition_file), "--store-path", str(path)]
    args += ["--manifest", str(tmp_path / "m.json"), "--no-progress"]
    assert main(args) == 0
    assert "indexed 6 files" in capsys.readouterr().out

    async def pages(file: Path) -> int:
        store = EmbeddedStore(path=file, definition=definition, dimensions=dimensions)
        await store.ensure_ready()
        try:
            return len(await store.list_pages())
        finally:
            await store.close()

    assert asyncio.run(pages(embedded_file(path, live.generation_id))) == 6
    assert not path.exists() or asyncio.run(pages(path)) == 0  # the legacy file is not written

    wider = {**definition_to_json(definition), "models": {"all-MiniLM-L6-v2": ["title", "content"]}}
    definition_file.write_text(json.dumps(wider), encoding="utf-8")
    assert main(args) == 2
    assert "run `ragbot reembed` first" in capsys.readouterr().err
