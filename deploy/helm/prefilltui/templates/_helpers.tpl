{{/* The chart's names and labels. */}}
{{- define "prefilltui.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "prefilltui.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "prefilltui.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prefilltui.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "prefilltui.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "prefilltui.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: exporter
{{- end -}}

{{- define "prefilltui.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "prefilltui.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* host:port of replica i as the scrape config's Prometheus reaches it. */}}
{{- define "prefilltui.replicaAddress" -}}
{{- $root := index . 0 -}}{{- $i := index . 1 -}}
{{- if $root.Values.scrapeConfig.replicaAddresses -}}
{{- index $root.Values.scrapeConfig.replicaAddresses $i -}}
{{- else -}}
{{- $fn := include "prefilltui.fullname" $root -}}
{{- printf "%s-%d.%s.%s.svc:%d" $fn (int $i) $fn $root.Release.Namespace (int $root.Values.port) -}}
{{- end -}}
{{- end -}}

{{/* Fail early on values that cannot work. */}}
{{- define "prefilltui.check" -}}
{{- if lt (int .Values.shards) 1 -}}{{- fail "shards must be >= 1" -}}{{- end -}}
{{- if and .Values.scrapeConfig.replicaAddresses (ne (len .Values.scrapeConfig.replicaAddresses) (int .Values.shards)) -}}
{{- fail "scrapeConfig.replicaAddresses needs one address per shard" -}}
{{- end -}}
{{- if and .Values.probe.enabled (gt (int .Values.shards) 1) -}}
{{- fail "probe.enabled needs shards: 1 (a Probe has one prober URL; with shards use scrapeConfig.probeJob, routed by hashmod)" -}}
{{- end -}}
{{- end -}}
