"""The lexical analyzer behind BM25 on both stores.

Steps: NFKC; lowercase; drop Hebrew niqqud and cantillation marks; join Hebrew acronyms written with
geresh/gershayim or ASCII quotes (``מע"מ`` -> ``מעמ``); split into ``\\w+`` tokens. A Hebrew token
(Hebrew letters only) starting with one of the one-letter prefixes ו ה ב ל מ ש כ also yields the
token without that letter, as long as at least ``MIN_STEM_LETTERS`` letters remain:
``ובבית`` -> ``ובבית``, ``בבית``; ``לעובדים`` -> ``לעובדים``, ``עובדים``. Documents and queries go
through the same function, so a query word with a prefix finds a paragraph without it and the other
way round. This is a light, dictionary-free stand-in for a Hebrew stemmer.

The depth (one letter) and the shortest stem (three letters) were chosen by BM25 on HeQ test
(``bench/retrieval/hebrew_analyzer.py``: title + text, 1072 queries, the stores' BM25F): nDCG@10 0.914
without variants, 0.939 with one letter and stems >= 3, 0.937 with stems >= 2, 0.935 and 0.934 when
two or three stacked prefix letters come off (``ובבית`` -> ``בית``): deeper stripping adds more
false matches than it finds.
``analyze(text, max_prefix=..., min_stem=...)`` keeps the other settings reachable for measurement.

Elasticsearch indexes ``" ".join(analyze(text))`` with its ``whitespace`` analyzer and the embedded
store counts the same tokens into its own BM25 index, so both stores see exactly these tokens.
"""

from __future__ import annotations

import re
import unicodedata

HEBREW_PREFIX_LETTERS = frozenset("והבלמשכ")
MAX_PREFIX_LETTERS = 1
MIN_STEM_LETTERS = 3

# Cantillation (U+0591-05AF) and niqqud/points (U+05B0-05BD, 05BF, 05C1-05C2, 05C4-05C5, 05C7).
_HEBREW_MARKS = re.compile("[\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7]")
# Acronym quotes between Hebrew letters: ASCII " and ', geresh U+05F3, gershayim U+05F4.
_ACRONYM_QUOTE = re.compile("(?<=[\u05d0-\u05ea])[\"'\u05f3\u05f4](?=[\u05d0-\u05ea])")
_TOKEN = re.compile(r"\w+")
_HEBREW_WORD = re.compile("[\u05d0-\u05ea]+")


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = _HEBREW_MARKS.sub("", text)
    return _ACRONYM_QUOTE.sub("", text)


def _prefix_variants(token: str, *, max_prefix: int, min_stem: int) -> list[str]:
    if not _HEBREW_WORD.fullmatch(token):
        return []
    variants: list[str] = []
    for i in range(1, max_prefix + 1):
        if token[i - 1] not in HEBREW_PREFIX_LETTERS or len(token) - i < min_stem:
            break
        variants.append(token[i:])
    return variants


def analyze(
    text: str, *, max_prefix: int = MAX_PREFIX_LETTERS, min_stem: int = MIN_STEM_LETTERS
) -> list[str]:
    """Tokens for BM25, Hebrew prefix variants right after their word; the same on every store."""
    tokens: list[str] = []
    for match in _TOKEN.finditer(_normalize(text)):
        token = match.group()
        tokens.append(token)
        if max_prefix > 0:
            tokens.extend(_prefix_variants(token, max_prefix=max_prefix, min_stem=min_stem))
    return tokens
