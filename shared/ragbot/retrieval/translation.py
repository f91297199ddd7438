"""Word-by-word translation of an English question into the corpus language, by the multilingual embedder.

Cross-language dense retrieval with a small multilingual model (e5-small) finds a Hebrew page for an
English question less often than for the same question in Hebrew. With no translation model, a
lexicon is induced from the embedder itself (bilingual lexicon induction): the corpus's own words are
embedded once, each content word of an English question is embedded at query time, and its nearest
corpus word by CSLS (cross-domain similarity local scaling: the cosine minus half the corpus word's
mean cosine to its 10 nearest common English words, which demotes "hub" words close to everything)
is its translation. Among each word's ``CANDIDATES`` best corpus words the one that also fits the whole
question wins (``CONTEXT_WEIGHT`` times its cosine to the question's vector is added to its CSLS), so a
word with several senses takes the one the question means. The engine averages the question's
vector with that translation's (``RetrievalEngine``). The corpus vocabulary is read from the store
(``corpus_vocabulary``); the common English words are ``wordfreq``'s most frequent.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragbot.definition import DocumentDefinition
from ragbot.errors import RagbotError
from ragbot.ports import Embedder, SearchStore
from ragbot.text.language import ANY_LANGUAGE, SCRIPT_LANGUAGES, script_of

logger = logging.getLogger(__name__)

SOURCE_LANGUAGE = "en"
# The question words never translated: English function words (closed classes).
STOP_WORDS = frozenset(
    str.split(
        """
    a an the is are am do does did i my me we our you your to of in on for at by with from and or if
    can how what when who which whom where why be been being have has had will would should could
    much many there this that these those it its as about into not no yes get got any some per s
        """
    )
)
HUB_NEIGHBOURS = 10
# The share by which the store's paragraph count must change before the lexicon is built again.
REBUILD_CHANGE = 0.05
REFERENCE_WORDS = 5000
# A content word's best corpus words by CSLS, among which the question chooses its translation, and the
# default weight of each one's cosine to the question in that choice (RAGBOT_RETRIEVER_TRANSLATION_CONTEXT).
CANDIDATES = 5
CONTEXT_WEIGHT = 0.5
_ENGLISH_WORD = re.compile(r"[A-Za-z]+|[0-9]+")
_WORD = re.compile(r"\w+(?:[\"'״׳]\w+)*")


def _script_of_language(language: str) -> str:
    for script, languages in SCRIPT_LANGUAGES.items():
        if language in languages:
            return script
    raise ValueError(f"no known script writes language {language!r}")


def corpus_words(texts: Iterable[str], *, language: str) -> Counter[str]:
    """Each word of ``texts`` written in ``language``'s script, with the number of texts it is in."""
    script = _script_of_language(language)
    frequency: Counter[str] = Counter()
    for text in texts:
        words = {
            w
            for w in _WORD.findall(text)
            if len(w) > 1 and all(script_of(c) == script for c in w if c.isalpha())
        }
        frequency.update(w for w in words if any(c.isalpha() for c in w))
    return frequency


def common_english_words(count: int = REFERENCE_WORDS) -> list[str]:
    """English's ``count`` most frequent alphabetic words (wordfreq's list)."""
    from wordfreq import top_n_list

    return [w for w in top_n_list(SOURCE_LANGUAGE, count * 2) if w.isascii() and w.isalpha()][:count]


@dataclass(frozen=True, slots=True)
class LexiconTranslator:
    """English question -> the corpus words nearest to its content words (CSLS) for one model."""

    model: str
    language: str
    words: tuple[str, ...]
    vectors: np.ndarray  # one unit row per word
    hubness: np.ndarray  # per word, the mean cosine to its HUB_NEIGHBOURS nearest common English words
    english: np.ndarray  # the common English words' unit rows (kept: a rebuild reuses them)

    @classmethod
    def build(
        cls,
        *,
        model: str,
        embedder: Embedder,
        language: str,
        words: Sequence[str],
        reference: Sequence[str],
        batch: int = 256,
        english: np.ndarray | None = None,
    ) -> LexiconTranslator:
        """Embed the corpus words and the common English words (as queries; ``english``: those rows,
        already embedded by this model) and keep each corpus word's hubness."""
        if not words or not reference:
            raise ValueError("a lexicon needs corpus words and common English words")

        def embed(texts: Sequence[str]) -> np.ndarray:  # unit rows, as every Embedder returns them
            return np.vstack(
                [embedder.embed_queries(texts[i : i + batch]) for i in range(0, len(texts), batch)]
            )

        vectors = embed(words)
        if english is None or len(english) != len(reference):
            english = embed(reference)
        hubness = np.empty(len(words), dtype=np.float32)
        k = min(HUB_NEIGHBOURS, len(reference))
        for i in range(0, len(words), 2048):
            sims = vectors[i : i + 2048] @ english.T
            hubness[i : i + 2048] = np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1)
        return cls(
            model=model,
            language=language,
            words=tuple(words),
            vectors=vectors,
            hubness=hubness,
            english=english,
        )

    def content_words(self, question: str) -> list[str]:
        """The question's English words and numbers, function words left out, in order."""
        return [w.lower() for w in _ENGLISH_WORD.findall(question) if w.lower() not in STOP_WORDS]

    def translate(self, question: str, embedder: Embedder, *, context: float = CONTEXT_WEIGHT) -> str:
        """Each content word's translation, numbers kept; "" when none: of its ``CANDIDATES`` nearest
        corpus words by CSLS, the one whose CSLS plus ``context`` times its cosine to the whole question
        is highest (the question is embedded in the same call; the engine's cache reuses it)."""
        words = self.content_words(question)
        letters = list(dict.fromkeys(w for w in words if not w.isdigit()))
        nearest: dict[str, str] = {}
        if letters:
            rows = embedder.embed_queries([question, *letters])
            scores = rows[1:] @ self.vectors.T - 0.5 * self.hubness
            k = min(CANDIDATES, len(self.words))
            best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            fit = self.vectors[best] @ rows[0]
            chosen = np.take_along_axis(scores, best, axis=1) + context * fit
            picks = best[np.arange(len(letters)), np.argmax(chosen, axis=1)]
            nearest = {w: self.words[int(i)] for w, i in zip(letters, picks, strict=True)}
        return " ".join(w if w.isdigit() else nearest[w] for w in words)


def translation_model(definition: DocumentDefinition, language: str) -> str | None:
    """The first model of the definition that serves both English and ``language``, if any."""
    for vector_field in definition.vector_fields:
        served = definition.languages_of(vector_field)
        if ANY_LANGUAGE in served or {SOURCE_LANGUAGE, language} <= set(served):
            return vector_field.model
    return None


async def corpus_vocabulary(
    store: SearchStore, definition: DocumentDefinition, *, language: str, limit: int, page_batch: int = 200
) -> list[str]:
    """The ``limit`` words of ``language`` in the most paragraphs of the store (every page read once)."""
    fields = definition.text_fields
    frequency: Counter[str] = Counter()
    offset = 0
    while True:
        pages = await store.list_pages(limit=page_batch, offset=offset)
        if not pages:
            break
        for state in pages:
            hits = await store.page_paragraphs(page_id=state.page_id)
            texts = (" ".join(str(h.source.get(f) or "") for f in fields) for h in hits)
            frequency.update(corpus_words(texts, language=language))
        offset += len(pages)
    return [w for w, _ in frequency.most_common(limit)]


async def build_translator(
    *,
    store: SearchStore,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    language: str,
    limit: int,
    reference_words: int = REFERENCE_WORDS,
    previous: LexiconTranslator | None = None,
) -> LexiconTranslator | None:
    """A translator into ``language`` for the model that serves it, from the store's words (None when
    no model serves both languages or the store holds no word of ``language``); ``previous``: the one it
    replaces, whose English rows are reused."""
    model = translation_model(definition, language)
    if model is None or model not in embedders:
        logger.warning("no model serves both English and %s: questions are not translated", language)
        return None
    started = time.perf_counter()
    words = await corpus_vocabulary(store, definition, language=language, limit=limit)
    if not words:
        logger.warning("the store holds no %s words yet: questions are not translated", language)
        return None
    translator = await asyncio.to_thread(
        LexiconTranslator.build,
        model=model,
        embedder=embedders[model],
        language=language,
        words=words,
        reference=common_english_words(reference_words),
        english=previous.english if previous is not None and previous.model == model else None,
    )
    logger.info(
        "English questions are translated into %s through %s: %d corpus words in %.1f s",
        language,
        model,
        len(words),
        time.perf_counter() - started,
    )
    return translator


async def keep_translating(
    set_translator: Callable[[LexiconTranslator], None],
    *,
    store: SearchStore,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    language: str,
    limit: int,
    poll_s: float,
    rebuild_change: float = REBUILD_CHANGE,
) -> None:
    """Forever: build the translator once the store holds paragraphs, and again when their number has
    changed by ``rebuild_change`` of it since the last build (a wiki indexed after the start, or grown
    since); only when the count held still over the last poll, so a bulk index is read once, after it
    ends. A build that found no word of ``language`` (a corpus in another one) waits for such a change
    too, and with no model serving both languages there is nothing to build."""
    model = translation_model(definition, language)
    if model is None or model not in embedders:
        logger.warning("no model serves both English and %s: questions are not translated", language)
        return
    current: LexiconTranslator | None = None
    built_from: int | None = None  # the paragraph count of the last build, whether it found words or not
    seen = -1
    while True:
        try:
            count = await store.count()
            settled, seen = count == seen, count
            changed = built_from is None or abs(count - built_from) >= rebuild_change * built_from
            if count and settled and changed:
                fresh = await build_translator(
                    store=store,
                    definition=definition,
                    embedders=embedders,
                    language=language,
                    limit=limit,
                    previous=current,
                )
                built_from = count
                if fresh is not None:
                    current = fresh
                    set_translator(fresh)
        except (RagbotError, OSError, ValueError) as exc:
            logger.warning("could not build the %s lexicon (questions go untranslated): %s", language, exc)
        await asyncio.sleep(poll_s)
