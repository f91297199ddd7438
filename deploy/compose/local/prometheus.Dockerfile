# Prometheus for the compose test stack: Debian's package (the official image cannot be pulled here);
# curl serves the healthcheck.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus curl \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
