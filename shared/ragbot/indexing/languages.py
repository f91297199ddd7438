"""Which vector fields embed a text: the ones whose model serves the text's language, as routing decides.

The definition file's ``languages`` (``ragbot.definition``) say which languages each vector field
serves, and the retriever's language routing (``ragbot.retrieval.routing``) never sends a question to
a field that does not serve its language. A vector of a text in a language the model does not serve
is therefore never searched by a question in that text's language, and across languages it is noise
(all-MiniLM-L6-v2's cosine between a Hebrew paragraph and its English translation is about -0.1).
It is also the dearest vector to compute: MiniLM's English tokenizer spends about one token per
Hebrew letter, so a Hebrew paragraph fills its 256 tokens.

So a text gets a field's vector only when the field serves the text's script (``detect_language``,
the detector routing uses), with routing's fallback mirrored: a text no vector field of the
definition serves is embedded by every field, and a text with no letters of a known script (numbers,
symbols) by every field too. A field declared for ``"*"`` embeds everything. Texts already indexed keep
the vectors they have until their page is indexed again (``ragbot reindex``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ragbot.definition import DocumentDefinition, VectorField
from ragbot.text.language import LanguageGuess, detect_language, serves

__all__ = ["LanguageFilter"]


class LanguageFilter:
    """Decides, per (vector field, text), whether the text is embedded; guesses each distinct text once."""

    def __init__(self, definition: DocumentDefinition) -> None:
        self._fields = list(definition.vector_fields)
        self._languages = {v.name: definition.languages_of(v) for v in self._fields}
        self._guesses: dict[str, LanguageGuess] = {}

    def embeds(self, vector_field: VectorField, text: str) -> bool:
        """True when ``vector_field`` should embed ``text`` (see the module doc)."""
        guess = self._guesses.get(text)
        if guess is None:
            guess = self._guesses[text] = detect_language(text)
        if not guess.known or serves(self._languages[vector_field.name], guess):
            return True
        return not any(serves(self._languages[v.name], guess) for v in self._fields)

    def kept(self, vector_field: VectorField, texts: Sequence[str]) -> list[str]:
        """``texts`` with the ones this field does not embed blanked (a blank text gets no vector)."""
        return [t if not t.strip() or self.embeds(vector_field, t) else "" for t in texts]
