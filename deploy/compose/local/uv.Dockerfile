# Stands in for ghcr.io/astral-sh/uv: the host's uv binary at /uv, as the official image has it.
FROM scratch
COPY uv /uv
