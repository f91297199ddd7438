"""Guess a text's writing system, and the languages written in it, from the share of its letters per script.

No model and no dictionary: a question's letters are counted per Unicode script (by code point
block), the dominant script names the languages it can be. Hebrew and Arabic questions are told
apart from English ones exactly, which is what routing the dense models needs; Latin-script
languages are not told apart from each other (a model that serves ``en`` is taken to serve any
Latin-script question).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

# Code point blocks of the scripts routing knows, sorted by start: (first, last, script).
_BLOCKS: tuple[tuple[int, int, str], ...] = tuple(
    sorted(
        (
            (0x0041, 0x005A, "latin"),
            (0x0061, 0x007A, "latin"),
            (0x00C0, 0x024F, "latin"),
            (0x0370, 0x03FF, "greek"),
            (0x0400, 0x052F, "cyrillic"),
            (0x0530, 0x058F, "armenian"),
            (0x0590, 0x05FF, "hebrew"),
            (0x0600, 0x06FF, "arabic"),
            (0x0750, 0x077F, "arabic"),
            (0x08A0, 0x08FF, "arabic"),
            (0x0900, 0x097F, "devanagari"),
            (0x0E00, 0x0E7F, "thai"),
            (0x10A0, 0x10FF, "georgian"),
            (0x1100, 0x11FF, "hangul"),
            (0x1E00, 0x1EFF, "latin"),
            (0x1F00, 0x1FFF, "greek"),
            (0x2C60, 0x2C7F, "latin"),
            (0x3040, 0x30FF, "kana"),
            (0x3130, 0x318F, "hangul"),
            (0x3400, 0x4DBF, "han"),
            (0x4E00, 0x9FFF, "han"),
            (0xA720, 0xA7FF, "latin"),
            (0xAC00, 0xD7AF, "hangul"),
            (0xFB1D, 0xFB4F, "hebrew"),
            (0xFB50, 0xFDFF, "arabic"),
            (0xFE70, 0xFEFF, "arabic"),
            (0xFF21, 0xFF3A, "latin"),
            (0xFF41, 0xFF5A, "latin"),
        )
    )
)
_STARTS = tuple(b[0] for b in _BLOCKS)

_LATIN_LANGUAGES = (
    "en fr de es it pt nl sv da no fi pl cs sk sl hr ro hu tr id ms vi ca eu gl et lv lt sq af sw"
)
# The languages (ISO 639-1) each script is written in, as far as routing cares.
SCRIPT_LANGUAGES: dict[str, frozenset[str]] = {
    "latin": frozenset(_LATIN_LANGUAGES.split()),
    "hebrew": frozenset({"he", "yi"}),
    "arabic": frozenset({"ar", "fa", "ur"}),
    "cyrillic": frozenset({"ru", "uk", "bg", "sr", "mk", "be", "kk"}),
    "greek": frozenset({"el"}),
    "armenian": frozenset({"hy"}),
    "georgian": frozenset({"ka"}),
    "devanagari": frozenset({"hi", "mr", "ne"}),
    "thai": frozenset({"th"}),
    "hangul": frozenset({"ko"}),
    "kana": frozenset({"ja"}),
    "han": frozenset({"zh", "ja"}),
}
ANY_LANGUAGE = "*"
# Below this share of the letters, the dominant script does not decide alone: the text is "mixed"
# and every script holding at least MINOR_SHARE of the letters contributes its languages.
DOMINANT_SHARE = 0.6
MINOR_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class LanguageGuess:
    """What a text is written in: its script ("mixed" or "unknown" too), the languages that fits, the
    dominant script's share of the letters and how many letters were counted."""

    script: str
    languages: frozenset[str]
    share: float
    letters: int

    @property
    def known(self) -> bool:
        """False when nothing could be said (no letters, or letters of scripts routing does not know)."""
        return bool(self.languages)


def script_of(char: str) -> str | None:
    """The script of one letter, or None for a character outside the known blocks."""
    code = ord(char)
    i = bisect.bisect_right(_STARTS, code) - 1
    if i >= 0 and _BLOCKS[i][0] <= code <= _BLOCKS[i][1]:
        return _BLOCKS[i][2]
    return None


def detect_language(text: str) -> LanguageGuess:
    """Guess the script and languages of ``text`` by the share of its letters in each script."""
    counts: Counter[str] = Counter()
    letters = 0
    for char in text:
        if not char.isalpha():
            continue
        letters += 1
        script = script_of(char)
        if script is not None:
            counts[script] += 1
    if not counts:
        return LanguageGuess("unknown", frozenset(), 0.0, letters)
    script, top = counts.most_common(1)[0]
    share = top / letters
    if share >= DOMINANT_SHARE:
        return LanguageGuess(script, SCRIPT_LANGUAGES[script], round(share, 4), letters)
    minor = [s for s, n in counts.items() if n / letters >= MINOR_SHARE]
    languages = frozenset().union(*(SCRIPT_LANGUAGES[s] for s in minor))
    return LanguageGuess("mixed", languages, round(share, 4), letters)


def serves(model_languages: tuple[str, ...] | frozenset[str], guess: LanguageGuess) -> bool:
    """True when a model declared for ``model_languages`` can embed a text of this guess."""
    return ANY_LANGUAGE in model_languages or bool(guess.languages.intersection(model_languages))
