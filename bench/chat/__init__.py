"""Chat: the chat service's own overhead and concurrent streaming sessions."""
