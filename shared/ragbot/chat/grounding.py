"""Strict mode's check of the LLM's answer as it streams: only sentences a source says reach the user.

A strict answer may use only the retrieved paragraphs, but a model does not always keep to them: a
small one writes text that is not in any source, a large one now and then adds what it knows and cites
a paragraph that does not say it. ``SentenceGate`` holds the streamed answer back one sentence at a
time (a sentence ends at ``.``, ``?``, ``!`` or a line break, with the ``[n]`` marks that follow it)
and passes a sentence only when one source holds at least ``min_share`` of its words
(``ragbot.text.support``, Hebrew prefix forms counted) and ``min_order`` of its neighbouring word
pairs in their order (a small model's shuffle of a source's words holds the first, not the second).
A passed sentence cites the sources that hold it: the model's own ``[n]`` marks when they point at
such a source, else the one that holds the most. A dropped sentence is never sent, nor is the
unfinished last one of an answer the token cap cut.
The chat pipeline answers with the sources' own sentences (the ``quote`` mode) when no sentence of the
model passes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragbot.chat.boilerplate import strip_furniture
from ragbot.chat.citations import cited_numbers
from ragbot.prompts import PromptDocument
from ragbot.settings import ChatSettings
from ragbot.text.support import (
    CITATION_MARK,
    order_share,
    paragraph_pairs,
    paragraph_tokens,
    sentence_words,
    support_share,
    word_forms,
)

# A sentence ends after one of these and the space after it, or at a line break.
_BOUNDARY = re.compile(r"(?<=[.!?…׃؟])[ \t]+|\n+")
_SPACE_BEFORE_END = re.compile(r"\s+([.!?…:;,])")
# The citation marks (and the spaces around them) that may follow a sentence's end.
_TRAILING_MARKS = re.compile(rf"(?:[ \t]*(?:{CITATION_MARK.pattern})[.!?]?)*")


@dataclass(frozen=True, slots=True)
class Checked:
    """One sentence of the model's answer, whether a source holds it, and the text to send if so."""

    sentence: str
    share: float
    kept: bool
    text: str
    after: str = ""  # what separates it from the next sentence sent (a space or a line break)


@dataclass(slots=True)
class SentenceGate:
    """Feed it the model's pieces; it returns the checked sentences as each one ends (see module doc).

    ``sources``: each source's number and text.
    """

    sources: Mapping[int, str]
    min_share: float
    min_order: float = 0.0
    _tokens: dict[int, set[str]] = field(init=False)
    _pairs: dict[int, set[tuple[str, str]]] = field(init=False)
    _buffer: str = field(init=False, default="")
    checked: list[Checked] = field(init=False, default_factory=list)
    _sent: list[str] = field(init=False, default_factory=list)
    _between: str = field(init=False, default="")  # what goes before the next sentence sent

    def __post_init__(self) -> None:
        self._tokens = {number: paragraph_tokens(text) for number, text in self.sources.items()}
        self._pairs = {number: paragraph_pairs(text) for number, text in self.sources.items()}

    @classmethod
    def for_turn(
        cls, mode: str, documents: Sequence[PromptDocument], settings: ChatSettings
    ) -> SentenceGate | None:
        """Strict mode's gate over the turn's numbered documents, the site's furniture lines left out
        of them (None: another mode, or ``strict_support_min`` 0 turns the check off)."""
        if mode != "strict" or settings.strict_support_min <= 0:
            return None
        sources = {d.number: strip_furniture(d.text) for d in documents}
        return cls(sources, settings.strict_support_min, settings.strict_order_min)

    def passed(self, piece: str | None, *, cut: bool = False) -> list[str]:
        """The text to send for the sentences ``piece`` completes (None: the answer ended; ``cut``: by
        the token cap, so its last sentence is unfinished and not sent)."""
        checked = self.close(cut=cut) if piece is None else self.feed(piece)
        out: list[str] = []
        for c in checked:
            if c.kept:
                out.append(self._between + c.text)
                self._between = c.after
        self._sent += out
        return out

    @property
    def kept(self) -> list[Checked]:
        """The sentences passed so far."""
        return [c for c in self.checked if c.kept]

    @property
    def answer(self) -> str:
        """The text sent so far."""
        return "".join(self._sent)

    def feed(self, piece: str) -> list[Checked]:
        """The sentences that ``piece`` completes, checked (a sentence's end is known only once the
        text after it starts, so the last sentence waits for ``close``)."""
        self._buffer += piece
        out: list[Checked] = []
        while True:
            found = self._next_sentence()
            if found is None:
                return out
            out.append(found)

    def close(self, *, cut: bool = False) -> list[Checked]:
        """The rest of the answer (a last sentence with no end mark), checked; dropped when ``cut``
        (half a sentence says nothing a source can hold)."""
        rest, self._buffer = self._buffer, ""
        if not rest.strip():
            return []
        if cut:
            self.checked.append(Checked(rest.strip(), 0.0, False, ""))
            return []
        return [self._check(rest, "")]

    def _next_sentence(self) -> Checked | None:
        match = _BOUNDARY.search(self._buffer)
        if match is None:
            return None
        after = self._buffer[match.end() :]
        marks = _TRAILING_MARKS.match(after)
        taken = marks.end() if marks else 0
        if taken == len(after):  # only marks (or nothing) after the end yet: they may belong to it
            return None
        sentence = self._buffer[: match.start()] + after[:taken]
        separator = "\n" if "\n" in match.group() else " "
        self._buffer = after[taken:].lstrip(" \t")
        return self._check(sentence, separator)

    def _check(self, sentence: str, separator: str) -> Checked:
        words, sequence = sentence_words(sentence), word_forms(sentence)
        shares = {number: support_share(words, tokens) for number, tokens in self._tokens.items()}
        best = max(shares.values(), default=0.0)
        holding = [
            number
            for number, share in shares.items()
            if share >= self.min_share and order_share(sequence, self._pairs[number]) >= self.min_order
        ]
        if not sentence.strip() or not holding:
            checked = Checked(sentence.strip(), best, False, "")
        else:
            own = [n for n in cited_numbers(sentence) if n in holding]
            marks = own or [max(holding, key=lambda n: shares[n])]
            body = _SPACE_BEFORE_END.sub(r"\1", CITATION_MARK.sub("", sentence)).strip()
            text = f"{body} {''.join(f'[{n}]' for n in marks)}"
            checked = Checked(sentence.strip(), best, True, text, separator)
        self.checked.append(checked)
        return checked
