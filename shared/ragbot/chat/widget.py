"""The Kol-Zchut chat widget's side of ragbot: the bodies the KZChatbot React app sends and reads, its
users (one uuid per browser, kept in a cookie) with a daily question allowance, and banned words.

The MediaWiki extension kept these users in a database table; here they live in Redis (``p`` is the
configured prefix):

- ``p:chat:widget:user:<uuid>``                 JSON of the user; expires with the cookie
- ``p:chat:widget:user:<uuid>:questions:<day>`` questions asked on that day (local to the configured
                                                time zone); expires two days later

A question is taken from the allowance before it is answered (an atomic ``INCR``; over the limit it is
handed back and refused) and handed back when no answer came, so failures cost the user nothing.
Redis errors become ``DependencyUnavailable("redis")``.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

import redis.asyncio as aioredis
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from ragbot.messaging.redis import redis_call
from ragbot.text import analyze

DAY_COUNTER_TTL_S: Final = 2 * 86400
BANNED_PREFIX_LETTERS: Final = 2
# uuids we issue are canonical uuid4 strings; anything far from that shape is unknown, not a key.
_UUID_SHAPE: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


# -- bodies ------------------------------------------------------------------------------------------


class QuestionRequest(BaseModel):
    """``POST /kzchatbot/v0/question``: the question, the browser's uuid and the page it was asked on."""

    text: str
    uuid: str
    referrer: str | None = Field(default=None, max_length=2000)


class DocLink(BaseModel):
    """A page the answer is based on."""

    title: str
    url: str | None = None


class QuestionAnswer(BaseModel):
    """The answer: Markdown, the pages it rests on, and the id ``/rate`` refers to."""

    llmResult: str  # the React app's field name
    docs: list[DocLink]
    conversationId: str


class RateRequest(BaseModel):
    """``POST /kzchatbot/v0/rate``: like (true), dislike (false) or withdrawn (null), with optional text.

    ``conversation_id`` is accepted for ``answerId`` (newer versions of the extension send both)."""

    model_config = ConfigDict(populate_by_name=True)

    answerId: str = Field(validation_alias=AliasChoices("answerId", "conversation_id"))
    like: bool | None = None
    text: str | None = None


class RateResult(BaseModel):
    """What was stored for the answer."""

    answerId: str
    like: bool | None
    text: str | None


class WidgetStatus(BaseModel):
    """``GET /kzchatbot/v0/status``: the uuid to keep, whether to show the chatbot, questions left today
    and when the cookie expires (RFC 3339)."""

    uuid: str
    chatbotIsShown: bool
    questionsPermitted: int
    cookieExpiry: str


# -- Hebrew messages (the extension's default texts where it has one) --------------------------------

MESSAGES: Final[dict[str, str]] = {
    "banned": "אנא נסחו מחדש את השאלה",
    "too_long": "מקסימום {limit} תווים",
    "daily_limit": "לא ניתן לשאול שאלות נוספות היום",
    "unknown_user": "המשתמש לא נמצא. נא לרענן את הדף ולנסות שוב",
    "empty": "נא לכתוב שאלה",
    "invalid": "הבקשה אינה תקינה",
    "unknown_answer": "התשובה לא נמצאה",
    "unavailable": "השירות אינו זמין כרגע. נא לנסות שוב מאוחר יותר",
    "failed": "אירעה שגיאה. נא לנסות שוב",
    "rate_limited": "נשלחו יותר מדי בקשות. נא לנסות שוב בעוד {seconds} שניות",
}


# -- banned words ------------------------------------------------------------------------------------


def find_banned(text: str, banned: Sequence[str]) -> str | None:
    """The first banned word or phrase the text contains, as configured; ``None`` when clean.

    Both sides go through the BM25 analyzer (NFKC, lowercase, no niqqud), so case and niqqud do not
    matter; a phrase matches consecutive words; a Hebrew word also matches with up to two prefix
    letters (``ו ה ב ל מ ש כ``: ``ובספאם`` for ``ספאם``) in front, as long as three letters remain.
    Words match whole: banning ``מס`` does not refuse ``מסמך``.
    """
    words = analyze(text, max_prefix=0)
    forms = [set(analyze(word, max_prefix=BANNED_PREFIX_LETTERS)) for word in words]
    for entry in banned:
        phrase = analyze(entry, max_prefix=0)
        if not phrase:
            continue
        for start in range(len(words) - len(phrase) + 1):
            if all(phrase[j] in forms[start + j] for j in range(len(phrase))):
                return entry
    return None


# -- users -------------------------------------------------------------------------------------------


class WidgetUser(BaseModel):
    """One browser of the widget."""

    uuid: str
    shown: bool
    created_at: str
    cookie_expiry: str


def rfc3339(moment: datetime) -> str:
    """UTC, seconds, ``Z``: what JavaScript's ``new Date()`` and MediaWiki's cookie code read."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WidgetUsers:
    """Widget users and their daily question counts in Redis."""

    def __init__(
        self,
        *,
        client: aioredis.Redis,
        prefix: str,
        daily_questions: int,
        cookie_days: int,
        shown_percent: int,
        timezone: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.daily_questions = daily_questions
        self.cookie_days = cookie_days
        self.shown_percent = shown_percent
        self.zone = ZoneInfo(timezone)
        self.clock = clock

    def _user_key(self, user_id: str) -> str:
        return f"{self.prefix}:chat:widget:user:{user_id}"

    def _count_key(self, user_id: str, day: date) -> str:
        return f"{self._user_key(user_id)}:questions:{day.isoformat()}"

    def today(self) -> date:
        """The day the allowance counts in (the configured time zone's calendar)."""
        return self.clock().astimezone(self.zone).date()

    async def create(self) -> WidgetUser:
        """A new uuid; whether it sees the chatbot is drawn once, by the rollout percentage."""
        now = self.clock()
        expiry = now + timedelta(days=self.cookie_days)
        user = WidgetUser(
            uuid=str(uuid.uuid4()),
            shown=random.uniform(0.0, 100.0) < self.shown_percent,  # a rollout, not a secret
            created_at=rfc3339(now),
            cookie_expiry=rfc3339(expiry),
        )
        await redis_call(
            "create widget user",
            lambda: self.client.set(
                self._user_key(user.uuid), user.model_dump_json(), exat=int(expiry.timestamp()) + 1
            ),
        )
        return user

    async def get(self, user_id: str) -> WidgetUser | None:
        """The user, or ``None`` when the uuid was never issued or has expired."""
        if not _UUID_SHAPE.fullmatch(user_id):
            return None
        raw = await redis_call("read widget user", lambda: self.client.get(self._user_key(user_id)))
        if raw is None:
            return None
        try:
            return WidgetUser.model_validate_json(raw)
        except ValidationError:
            return None  # written by an incompatible version: treat as unknown, a new uuid follows

    async def questions_permitted(self, user_id: str) -> int:
        """Questions the user may still ask today."""
        raw = await redis_call(
            "read question count", lambda: self.client.get(self._count_key(user_id, self.today()))
        )
        used = int(raw) if raw is not None else 0
        return max(self.daily_questions - used, 0)

    async def take_question(self, user_id: str) -> date | None:
        """Use one of today's questions; the day it counted on, or ``None`` when none was left."""
        day = self.today()
        key = self._count_key(user_id, day)

        async def take() -> int:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, DAY_COUNTER_TTL_S)
                used, _ = await pipe.execute()
            if int(used) > self.daily_questions:
                await self.client.decr(key)
            return int(used)

        used = await redis_call("count question", take)
        return day if used <= self.daily_questions else None

    async def give_back(self, user_id: str, day: date) -> None:
        """Return a question that got no answer."""
        await redis_call("return question", lambda: self.client.decr(self._count_key(user_id, day)))
