{{/* Names, labels and the environment every ragbot container shares. */}}

{{- define "ragbot.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ragbot.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ragbot.labels" -}}
{{ include "ragbot.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- /* The image of one role: (list $root "ingest") gives <repository>-ingest:<tag> (deploy/Dockerfile). */ -}}
{{- define "ragbot.image" -}}
{{- $root := index . 0 -}}
{{ $root.Values.image.repository }}-{{ index . 1 }}:{{ $root.Values.image.tag | default $root.Chart.AppVersion }}
{{- end -}}

{{- define "ragbot.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.secrets.existingSecret }}
      key: {{ .key }}
{{- end -}}

{{/* compose.yaml's x-ragbot-env: Redis, the store, the definition, logging. */}}
{{- define "ragbot.commonEnv" -}}
{{ include "ragbot.secretEnv" (dict "root" . "name" "REDIS_PASSWORD" "key" .Values.secrets.keys.redisPassword) }}
- name: RAGBOT_REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@{{ .Values.redis.host }}:{{ .Values.redis.port }}/{{ .Values.redis.db }}"
- name: RAGBOT_REDIS_KEY_PREFIX
  value: {{ .Values.redis.keyPrefix | quote }}
- name: RAGBOT_STORE_BACKEND
  value: elasticsearch
- name: RAGBOT_STORE_ES_URL
  value: {{ .Values.elasticsearch.url | quote }}
- name: RAGBOT_STORE_ES_USERNAME
  value: {{ .Values.elasticsearch.username | quote }}
{{ include "ragbot.secretEnv" (dict "root" . "name" "RAGBOT_STORE_ES_PASSWORD" "key" .Values.secrets.keys.elasticPassword) }}
- name: RAGBOT_STORE_ES_INDEX_PREFIX
  value: {{ .Values.elasticsearch.indexPrefix | quote }}
- name: RAGBOT_STORE_ES_SHARDS
  value: {{ .Values.elasticsearch.shards | quote }}
- name: RAGBOT_STORE_ES_REPLICAS
  value: {{ .Values.elasticsearch.replicas | quote }}
- name: RAGBOT_STORE_VECTOR_SEARCH
  value: {{ .Values.elasticsearch.vectorSearch | quote }}
- name: RAGBOT_DOCUMENT_DEFINITION
  value: {{ if .Values.definition }}/etc/ragbot/definition.json{{ else }}/app/config/definition.json{{ end }}
{{- $fullname := include "ragbot.fullname" . }}
- name: RAGBOT_HTTP_TRUSTED_HOSTS
  value: {{ concat (list (printf "%s-ingest" $fullname) (printf "%s-retriever" $fullname) (printf "%s-chat" $fullname)) (.Values.http.trustedHosts | default list) | toJson | quote }}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* compose.yaml's x-auth-env: the plain keys from the secret, hashed at load, never logged. */}}
{{- define "ragbot.authEnv" -}}
{{- $keys := .Values.secrets.keys -}}
{{ include "ragbot.secretEnv" (dict "root" . "name" "WIKI_API_KEY" "key" $keys.wikiApiKey) }}
{{ include "ragbot.secretEnv" (dict "root" . "name" "KZCHATBOT_API_KEY" "key" $keys.kzchatbotApiKey) }}
{{ include "ragbot.secretEnv" (dict "root" . "name" "ADMIN_API_KEY" "key" $keys.adminApiKey) }}
{{ include "ragbot.secretEnv" (dict "root" . "name" "SERVICE_API_KEY" "key" $keys.serviceApiKey) }}
{{ include "ragbot.secretEnv" (dict "root" . "name" "METRICS_API_KEY" "key" $keys.metricsApiKey) }}
- name: RAGBOT_AUTH_KEYS
  value: >-
    [{"name": "wiki", "scopes": ["ingest"], "key": "$(WIKI_API_KEY)"},
    {"name": "kzchatbot", "scopes": ["chat", "admin"], "key": "$(KZCHATBOT_API_KEY)"},
    {"name": "admin", "scopes": ["admin", "chat", "ingest"], "key": "$(ADMIN_API_KEY)"},
    {"name": "chat-service", "scopes": ["retrieve", "ingest"], "key": "$(SERVICE_API_KEY)"},
    {"name": "prometheus", "scopes": ["metrics"], "key": "$(METRICS_API_KEY)"}]
{{ include "ragbot.secretEnv" (dict "root" . "name" "RAGBOT_AUTH_SESSION_SECRET" "key" $keys.sessionSecret) }}
{{- end -}}

{{- define "ragbot.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ .root.Values.probes.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.startupFailureThreshold }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ .root.Values.probes.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.failureThreshold }}
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  initialDelaySeconds: {{ .root.Values.probes.initialDelaySeconds }}
  periodSeconds: {{ .root.Values.probes.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.failureThreshold }}
{{- end -}}

{{- define "ragbot.definitionVolume" -}}
{{- if .Values.definition }}
- name: definition
  configMap:
    name: {{ include "ragbot.fullname" . }}-definition
{{- end }}
{{- end -}}

{{- define "ragbot.definitionMount" -}}
{{- if .Values.definition }}
- name: definition
  mountPath: /etc/ragbot
  readOnly: true
{{- end }}
{{- end -}}

{{/* Every worker's RAGBOT_MEDIAWIKI_* (any worker may run the poll the beat worker sends); none without apiUrl. */}}
{{- define "ragbot.mediawikiEnv" -}}
{{- with .Values.mediawiki }}
{{- if .apiUrl }}
- name: RAGBOT_MEDIAWIKI_API_URL
  value: {{ .apiUrl | quote }}
- name: RAGBOT_MEDIAWIKI_NAMESPACES
  value: {{ .namespaces | toJson | quote }}
- name: RAGBOT_MEDIAWIKI_POLL_INTERVAL_S
  value: {{ .pollIntervalS | quote }}
{{- if .user }}
- name: RAGBOT_MEDIAWIKI_USER
  value: {{ .user | quote }}
{{ include "ragbot.secretEnv" (dict "root" $ "name" "RAGBOT_MEDIAWIKI_PASSWORD" "key" $.Values.secrets.keys.mediawikiPassword) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
