"""ragbot chat: sessions, answer modes and streamed answers with citations, over HTTP and a web UI.

Requests enter at one router per contract: ``native`` (ragbot's own API), ``openai_compat``
(``/v1/chat/completions``), ``kolzchut`` (KZChatbot's routes) and ``widget`` (the React widget), plus
``ui`` (the web pages); ``service`` runs what they share, ``sse`` frames streams, and the
composition root in ``app`` builds the pipeline, the LLM and the Redis sessions.
"""
