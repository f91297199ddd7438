# Elasticsearch for the compose test stack: the Maven Central integ-test distribution (no x-pack) on
# Debian's JDK 17, laid out as the official image (home /usr/share/elasticsearch, uid 1000), because
# no image registry is reachable here. The build context holds the zip that scripts/services.sh caches.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG ES_VERSION=8.19.21
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl unzip \
    && rm -rf /var/lib/apt/lists/*
COPY elasticsearch-${ES_VERSION}.zip /tmp/elasticsearch.zip
RUN unzip -q /tmp/elasticsearch.zip -d /usr/share \
    && mv /usr/share/elasticsearch-${ES_VERSION} /usr/share/elasticsearch \
    && rm /tmp/elasticsearch.zip \
    && useradd --uid 1000 --home-dir /usr/share/elasticsearch --shell /usr/sbin/nologin elasticsearch \
    && mkdir -p /usr/share/elasticsearch/data /usr/share/elasticsearch/logs \
    && chown -R elasticsearch /usr/share/elasticsearch
ENV ES_JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
WORKDIR /usr/share/elasticsearch
USER elasticsearch
CMD ["/usr/share/elasticsearch/bin/elasticsearch"]
