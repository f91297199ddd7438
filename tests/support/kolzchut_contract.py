"""What the Kol-Zchut chatbot contract fixes, written out once for the unit and integration tests."""

from __future__ import annotations

# The keys of the chatbot config, exactly as the MediaWiki extension KZChatbot reads and writes them.
CONFIG_FIELDS = frozenset(
    {
        "version",
        "model",
        "num_of_pages",
        "add_current_page_to_search",
        "temperature",
        "system_prompt",
        "user_prompt",
        "banned_fields",
        "rephrase_prompt",
    }
)
