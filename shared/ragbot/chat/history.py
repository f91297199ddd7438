"""Which earlier turns of a conversation go with a follow-up to the LLM, within a character budget."""

from __future__ import annotations

from collections.abc import Sequence

from ragbot.chat.events import HistoryTurn


def recent_turns(history: Sequence[HistoryTurn], *, keep: int, budget_chars: int) -> list[HistoryTurn]:
    """The last ``keep`` turns within ``budget_chars``: newest first in, older answers clipped.

    Every character of history is read by the LLM before it answers (twice with a follow-up rewrite);
    a small embedded model reads a Hebrew letter as a token, so the history is budgeted like the
    documents.
    """
    if keep <= 0 or not history:
        return []
    left = budget_chars
    kept: list[HistoryTurn] = []
    for turn in reversed(list(history)[-keep:]):
        if left <= 0:
            break
        question = turn.question[:left]
        left -= len(question)
        answer = turn.answer if len(turn.answer) <= left else turn.answer[: max(left, 0)].rstrip() + "…"
        left -= len(answer)
        kept.append(HistoryTurn(question, answer))
    kept.reverse()
    return kept
