"""Prompt files per language, overridable file by file, and the one way paragraphs reach the model.

Packaged files live next to this module as ``<language>/<name>.txt`` (``he`` and ``en``); a
``prompts_dir`` setting may hold the same layout and wins file by file. Templates name their slots
``{documents}``, ``{question}``, ``{history}`` and ``{mode_instructions}``; ``render`` fills them in one
pass, so text inside a slot (a paragraph that says ``{question}``) is never substituted again.

Paragraphs are data, never instructions: ``format_documents`` numbers them inside
``<document id="n">`` blocks and defuses anything in their text that looks like our delimiters, so a
paragraph cannot close its block and speak as the system.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Final, Literal

from ragbot.errors import ConfigurationError

Language = Literal["he", "en"]
LANGUAGES: Final[tuple[Language, ...]] = ("he", "en")
PROMPT_NAMES: Final[tuple[str, ...]] = (
    "system",
    "user",
    "rephrase",
    "strict",
    "grounded",
    "open",
    "no_documents",
    "no_context",
)
PACKAGED_DIR: Final = Path(__file__).resolve().parent
SLOTS: Final = ("documents", "question", "history", "mode_instructions")
_SLOT = re.compile(r"\{(" + "|".join(SLOTS) + r")\}")
_DELIMITER = re.compile(r"<(\s*/?\s*documents?\b)", re.IGNORECASE)
_HEBREW = re.compile(r"[\u0590-\u05FF]")


def detect_language(text: str) -> Language:
    """Hebrew when the text has Hebrew letters, else English."""
    return "he" if _HEBREW.search(text) else "en"


def render(template: str, **values: str) -> str:
    """Fill ``{slot}`` markers in one pass; unknown braces (JSON examples, other text) stay as they are."""
    return _SLOT.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def defuse(text: str) -> str:
    """Text that cannot open or close a ``<document>``/``<documents>`` block (``<`` becomes ``‹``)."""
    return _DELIMITER.sub(lambda m: "‹" + m.group(1), text)


@dataclass(frozen=True, slots=True)
class PromptDocument:
    """One numbered paragraph as the model sees it."""

    number: int
    title: str
    text: str


def format_documents(documents: Sequence[PromptDocument]) -> str:
    """Numbered, delimited data blocks (the inside of ``<documents>``)."""
    blocks = []
    for doc in documents:
        title = defuse(doc.title).replace('"', "'").replace("\n", " ")
        blocks.append(
            f'<document id="{doc.number}" title="{title}">\n{defuse(doc.text).strip()}\n</document>'
        )
    return "\n".join(blocks)


class PromptLibrary:
    """Reads prompt files: the override folder first, then the packaged ones; cached per path."""

    def __init__(self, override_dir: Path | None = None) -> None:
        self.override_dir = override_dir

    def get(self, name: str, language: Language) -> str:
        """The text of one prompt file (English when a language lacks it)."""
        if name not in PROMPT_NAMES:
            raise ConfigurationError(f"unknown prompt {name!r}; known prompts: {list(PROMPT_NAMES)}")
        for lang in dict.fromkeys((language, "en")):
            for base in (self.override_dir, PACKAGED_DIR):
                if base is None:
                    continue
                path = base / lang / f"{name}.txt"
                if path.is_file():
                    return _read(path)
        raise ConfigurationError(f"prompt file {language}/{name}.txt is missing")

    def check(self) -> None:
        """Load every prompt of every language once (a bad prompts folder fails at start, not mid-chat)."""
        if self.override_dir is not None and not self.override_dir.is_dir():
            raise ConfigurationError(f"RAGBOT_CHAT_PROMPTS_DIR {str(self.override_dir)!r} is not a folder")
        for language in LANGUAGES:
            for name in PROMPT_NAMES:
                self.get(name, language)

    def all(self, language: Language) -> Mapping[str, str]:
        """Every prompt of a language by name."""
        return {name: self.get(name, language) for name in PROMPT_NAMES}


@lru_cache(maxsize=256)
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


__all__ = [
    "LANGUAGES",
    "PROMPT_NAMES",
    "Language",
    "PromptDocument",
    "PromptLibrary",
    "defuse",
    "detect_language",
    "format_documents",
    "render",
]
