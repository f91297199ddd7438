"""Language detection, the definition's ``languages`` and the engine's routing of dense branches."""

from __future__ import annotations

from typing import Any

import pytest
from support.fakes import HashEmbedder, MemoryStore

from ragbot.definition import PACKAGED_LANGUAGES, DocumentDefinition, VectorField, parse_definition
from ragbot.embedders import _ALIASES as EMBEDDER_ALIASES
from ragbot.embedders import PACKAGED, canonical_name
from ragbot.errors import ConfigurationError
from ragbot.ports import StoredParagraph
from ragbot.retrieval import BM25_BRANCH, RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.results import Branch
from ragbot.retrieval.routing import route_branches
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.text.language import detect_language, script_of, serves

SAVED = {"title": "text", "page_id": "integer", "content": "text"}


def definition(models: dict[str, Any]) -> DocumentDefinition:
    return parse_definition(
        {"identifier_field": "page_id", "saved_fields": SAVED, "field_for_llm": "content", "models": models}
    )


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "script", "language"),
    [
        ("מה הן זכויותיי כעובד במשמרת לילה?", "hebrew", "he"),
        ("מִשְׁפָּט עִם נִקּוּד", "hebrew", "he"),  # niqqud marks are not letters: still all Hebrew
        ("ما هي حقوقي كعامل؟", "arabic", "ar"),
        ("What are my rights as a night-shift worker?", "latin", "en"),
        ("Quels sont mes droits ?", "latin", "fr"),
        ("Какие у меня права?", "cyrillic", "ru"),
        ("דמי אבטלה COVID-19 2020", "hebrew", "he"),  # 8 Hebrew letters of 13: Hebrew dominates
    ],
)
def test_detects_the_dominant_script(text: str, script: str, language: str) -> None:
    guess = detect_language(text)
    assert guess.script == script
    assert language in guess.languages
    assert guess.known


def test_hebrew_is_not_english_and_english_is_not_hebrew() -> None:
    assert "en" not in detect_language("זכויות עובדים").languages
    assert "he" not in detect_language("workers rights").languages


def test_mixed_text_names_every_script_with_a_fair_share() -> None:
    guess = detect_language("חוק שכר מינימום minimum wage")  # 13 Hebrew letters, 11 Latin: no 60%
    assert guess.script == "mixed"
    assert {"he", "en"} <= guess.languages
    assert guess.share == round(13 / 24, 4) and guess.letters == 24


def test_no_letters_is_unknown() -> None:
    for text in ("", "12345 ?!", "😀 42"):
        guess = detect_language(text)
        assert guess.script == "unknown" and not guess.known and guess.languages == frozenset()


def test_script_of_single_letters() -> None:
    assert script_of("א") == "hebrew"
    assert script_of("ﭏ") == "hebrew"  # presentation form (U+FB4F)
    assert script_of("z") == "latin"
    assert script_of("é") == "latin"
    assert script_of("ب") == "arabic"
    assert script_of("中") == "han"
    assert script_of("1") is None


def test_serves() -> None:
    he = detect_language("שכר מינימום")
    assert serves(("*",), he)
    assert serves(("he", "en"), he)
    assert not serves(("en",), he)
    assert serves(("en",), detect_language("minimum wage"))


# -- the definition file -----------------------------------------------------------------------


def test_todays_format_gets_the_packaged_defaults() -> None:
    d = definition(
        {"all-MiniLM-L6-v2": "content", "multilingual-e5-small": ["title", "content"], "mine": "title"}
    )
    assert d.languages_of(VectorField("all-MiniLM-L6-v2", "content")) == ("en",)
    assert d.languages_of(VectorField("multilingual-e5-small", "title")) == ("*",)
    assert d.languages_of(VectorField("multilingual-e5-small", "content")) == ("*",)
    assert d.languages_of(VectorField("mine", "title")) == ("*",)  # unknown model: all languages
    assert d.stated_languages == frozenset()
    assert d.models == {
        "all-MiniLM-L6-v2": ("content",),
        "multilingual-e5-small": ("title", "content"),
        "mine": ("title",),
    }


def test_object_form_states_languages_per_model_and_per_field() -> None:
    d = definition(
        {
            "all-MiniLM-L6-v2": {"fields": "content", "languages": ["EN", "fr"]},
            "mine": {"fields": ["title", "content"], "languages": {"title": ["he"]}},
            "other": {"fields": ["content"]},
        }
    )
    assert d.languages_of(VectorField("all-MiniLM-L6-v2", "content")) == ("en", "fr")
    assert d.languages_of(VectorField("mine", "title")) == ("he",)
    assert d.languages_of(VectorField("mine", "content")) == ("*",)
    assert d.languages_of(VectorField("other", "content")) == ("*",)
    assert d.stated_languages == {"content_all-MiniLM-L6-v2_vectors", "title_mine_vectors"}
    assert d.models["mine"] == ("title", "content")
    rebuilt = definition({m: d.model_entry(m) for m in d.models})
    assert rebuilt.languages == d.languages and rebuilt.models == d.models


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"fields": "content", "languages": []}, "non-empty list"),
        ({"fields": "content", "languages": "en"}, "non-empty list"),
        ({"fields": "content", "languages": ["en", 3]}, "non-empty list"),
        ({"fields": "content", "languages": {"title": ["en"]}}, "does not embed"),
        ({"fields": "content", "langs": ["en"]}, "unknown key"),
        ({"languages": ["en"]}, "must name its 'fields'"),
        ({"fields": "nope"}, "not in saved_fields"),
    ],
)
def test_bad_languages_name_the_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        definition({"m": entry})
    assert "models.m" in str(info.value)


def test_every_packaged_alias_has_the_languages_of_its_model() -> None:
    for alias, canonical in EMBEDDER_ALIASES.items():
        assert PACKAGED_LANGUAGES[alias] == PACKAGED_LANGUAGES[canonical.lower()], alias
    assert set(PACKAGED_LANGUAGES) == set(EMBEDDER_ALIASES)
    assert all(canonical_name(m) == m for m in PACKAGED)


# -- route_branches (pure) ---------------------------------------------------------------------

MINI = Branch("content_mini_vectors", "dense", 1.0, "mini", "content")
E5 = Branch("content_e5_vectors", "dense", 0.5, "e5", "content")
BM25 = Branch(BM25_BRANCH, "bm25", 1.0)
LANGS = {"mini": ("en",), "e5": ("*",)}


def languages_of(branch: Branch) -> tuple[str, ...]:
    return LANGS[branch.model or ""]


def test_hebrew_skips_the_english_model_and_keeps_weights() -> None:
    routing = route_branches(
        [MINI, E5, BM25], languages_of=languages_of, guess=detect_language("שכר מינימום")
    )
    assert routing.kept == (E5, BM25) and routing.kept[0].weight == 0.5
    assert routing.skipped == (MINI,)
    view = routing.as_debug()
    assert view["ran"] == [E5.name, BM25_BRANCH]
    assert "serves en only" in view["skipped"][MINI.name] and "hebrew" in view["skipped"][MINI.name]
    assert view["detected"]["script"] == "hebrew" and "he" in view["detected"]["languages"]
    assert view["branches"][BM25_BRANCH]["ran"] is True
    assert not routing.fallback


def test_english_runs_everything() -> None:
    routing = route_branches(
        [MINI, E5, BM25], languages_of=languages_of, guess=detect_language("minimum wage")
    )
    assert routing.kept == (MINI, E5, BM25) and routing.skipped == ()


def test_no_serving_dense_branch_keeps_all_of_them() -> None:
    routing = route_branches([MINI, BM25], languages_of=languages_of, guess=detect_language("שכר"))
    assert routing.kept == (MINI, BM25) and routing.fallback
    assert "no dense branch serves" in routing.as_debug()["branches"][MINI.name]["reason"]


def test_off_or_undetected_keeps_all() -> None:
    off = route_branches([MINI, E5], languages_of=languages_of, guess=None, enabled=False, why_off="off")
    assert off.kept == (MINI, E5) and off.as_debug()["branches"][MINI.name]["reason"] == "off"
    unknown = route_branches([MINI, E5], languages_of=languages_of, guess=detect_language("2024"))
    assert (
        unknown.kept == (MINI, E5) and "not detected" in unknown.as_debug()["branches"][MINI.name]["reason"]
    )


# -- the engine --------------------------------------------------------------------------------

PAGES = {
    1: ("דמי אבטלה", "מי זכאי לדמי אבטלה ואיך מגישים תביעה"),
    2: ("Unemployment benefits", "Who is eligible for unemployment benefits and how to claim"),
}


def engine_for(**defaults: Any) -> tuple[RetrievalEngine, MemoryStore]:
    d = definition({"mini": {"fields": "content", "languages": ["en"]}, "e5": ["title", "content"]})
    embs = {name: HashEmbedder(name, dimension=32, max_tokens=256) for name in ("mini", "e5")}
    paragraphs = []
    for page_id, (title, text) in PAGES.items():
        fields: dict[str, Any] = {"title": title, "content": text, "page_id": page_id}
        vectors = {v.name: embs[v.model].embed_passages([str(fields[v.field])])[0] for v in d.vector_fields}
        paragraphs.append(StoredParagraph(f"{page_id}-1-0", page_id, 1, 0, fields, vectors))
    store = MemoryStore(paragraphs)
    return RetrievalEngine(
        store=store, embedders=embs, definition=d, defaults=RetrievalDefaults(**defaults)
    ), store


async def test_engine_routes_a_hebrew_question_away_from_the_english_model() -> None:
    engine, store = engine_for()
    response = await engine.retrieve(RetrieveRequest(query="מי זכאי לדמי אבטלה"))
    assert sorted(store.calls) == ["bm25", "knn:content_e5_vectors", "knn:title_e5_vectors"]
    debug = response.debug.model_dump()
    assert set(debug["branches"]) == {"content_e5_vectors", "title_e5_vectors", BM25_BRANCH}
    assert debug["branches"]["content_e5_vectors"]["languages"] == ["*"]
    assert debug["routing"]["skipped"].keys() == {"content_mini_vectors"}
    assert response.documents and response.documents[0].page_id == 1


async def test_engine_english_question_searches_every_branch() -> None:
    engine, store = engine_for()
    response = await engine.retrieve(RetrieveRequest(query="unemployment benefits"))
    assert "knn:content_mini_vectors" in store.calls and len(store.calls) == 4
    assert response.debug.model_dump()["routing"]["skipped"] == {}
    assert response.debug.model_dump()["branches"]["content_mini_vectors"]["languages"] == ["en"]


async def test_engine_routing_off_or_explicit_models_search_as_asked() -> None:
    engine, store = engine_for(language_routing=False)
    response = await engine.retrieve(RetrieveRequest(query="מי זכאי לדמי אבטלה"))
    assert "knn:content_mini_vectors" in store.calls
    assert response.debug.model_dump()["routing"]["enabled"] is False
    engine, store = engine_for()
    response = await engine.retrieve(RetrieveRequest(query="מי זכאי לדמי אבטלה", models={"mini": 1.0}))
    assert store.calls.count("knn:content_mini_vectors") == 1
    routes = response.debug.model_dump()["routing"]["branches"]
    assert "names its models" in routes["content_mini_vectors"]["reason"]


async def test_engine_semantic_mode_with_only_an_english_model_still_searches() -> None:
    d = definition({"mini": {"fields": "content", "languages": ["en"]}})
    emb = HashEmbedder("mini", dimension=32, max_tokens=256)
    fields: dict[str, Any] = {"title": "t", "content": "שכר מינימום", "page_id": 1}
    para = StoredParagraph(
        "1-1-0", 1, 1, 0, fields, {"content_mini_vectors": emb.embed_passages(["שכר מינימום"])[0]}
    )
    store = MemoryStore([para])
    engine = RetrievalEngine(store=store, embedders={"mini": emb}, definition=d)
    response = await engine.retrieve(RetrieveRequest(query="שכר מינימום", mode="semantic", rerank=False))
    assert store.calls == ["knn:content_mini_vectors"]
    assert response.documents and response.debug.model_dump()["routing"]["fallback"] is True


async def test_engine_language_weights_scale_the_branches_of_that_language_only() -> None:
    table = {"en": {"mini": 0.0, "bm25": 0.5}}
    engine, _ = engine_for(language_weights=table)
    english = (await engine.retrieve(RetrieveRequest(query="unemployment benefits"))).debug.model_dump()
    assert english["branches"]["content_mini_vectors"]["weight"] == 0.0
    assert english["branches"][BM25_BRANCH]["weight"] == 0.5
    assert english["branches"]["content_e5_vectors"]["weight"] == 1.0
    hebrew = (await engine.retrieve(RetrieveRequest(query="מי זכאי לדמי אבטלה"))).debug.model_dump()
    assert hebrew["branches"][BM25_BRANCH]["weight"] == 1.0
    # a request that names its models is searched as asked
    named = await engine.retrieve(RetrieveRequest(query="unemployment benefits", models={"mini": 1.0}))
    assert named.debug.model_dump()["branches"]["content_mini_vectors"]["weight"] == 1.0


# -- per-field fusion weights ------------------------------------------------------------------


def test_weights_per_field_or_for_every_field_default_to_one() -> None:
    d = definition(
        {
            "mini": "content",
            "e5": {"fields": ["title", "content"], "weights": {"title": 0.25}},
            "other": {"fields": ["title", "content"], "weights": 2},
        }
    )
    assert d.weight_of(VectorField("e5", "title")) == 0.25
    assert d.weight_of(VectorField("e5", "content")) == 1.0
    assert d.weight_of(VectorField("mini", "content")) == 1.0
    assert d.weight_of(VectorField("other", "title")) == d.weight_of(VectorField("other", "content")) == 2.0
    assert "weights" not in d.model_entry("mini")
    assert d.model_entry("e5")["weights"] == {"title": 0.25, "content": 1.0}
    rebuilt = definition({m: d.model_entry(m) for m in d.models})
    assert rebuilt.field_weights == d.field_weights


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"summary": 1}, "does not embed"),
        ({"title": -1}, "finite number >= 0"),
        ({"title": "half"}, "finite number >= 0"),
        (True, "finite number >= 0"),
        (float("nan"), "finite number >= 0"),
    ],
)
def test_bad_weights_name_the_key(weights: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        definition({"e5": {"fields": ["title", "content"], "weights": weights}})
    assert "models.e5.weights" in str(info.value)


async def test_engine_multiplies_the_model_weight_by_the_field_weight_and_skips_zero() -> None:
    engine, _ = engine_for()
    weighted = definition(
        {
            "mini": {"fields": "content", "languages": ["en"]},
            "e5": {"fields": ["title", "content"], "weights": {"title": 0.5}},
        }
    )
    engine.definition = weighted
    response = await engine.retrieve(
        RetrieveRequest(query="unemployment benefits", models={"e5": 2.0, "mini": 1})
    )
    branches = response.debug.model_dump()["branches"]
    assert branches["title_e5_vectors"]["weight"] == 1.0
    assert branches["content_e5_vectors"]["weight"] == 2.0
    assert branches["content_mini_vectors"]["weight"] == 1.0
    engine.definition = definition(
        {
            "mini": {"fields": "content", "languages": ["en"]},
            "e5": {"fields": ["title", "content"], "weights": {"title": 0}},
        }
    )
    engine_store = engine.store
    assert isinstance(engine_store, MemoryStore)
    engine_store.calls.clear()
    response = await engine.retrieve(RetrieveRequest(query="unemployment benefits"))
    assert "knn:title_e5_vectors" not in engine_store.calls
    assert "title_e5_vectors" not in response.debug.model_dump()["branches"]
