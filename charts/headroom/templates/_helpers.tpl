{{/*
The name of every object: the release name when it contains "headroom", else
"<release>-headroom" (fullnameOverride wins). `helm install headroom` gives the names
`kubectl apply -k daemonset/` gives.
*/}}
{{- define "headroom.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "headroom" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-headroom" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. The selector is the first line alone. */}}
{{- define "headroom.labels" -}}
app.kubernetes.io/name: headroom
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "headroom.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "headroom.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the existing ServiceAccount to run as (serviceAccount.create is false)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "headroom.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The port of agent.listen ("0.0.0.0:9737", "[::]:9737"). */}}
{{- define "headroom.port" -}}
{{- $port := .Values.agent.listen | splitList ":" | last -}}
{{- if not (regexMatch "^[0-9]+$" $port) -}}
{{- fail (printf "agent.listen: %q has no port; write e.g. 0.0.0.0:9737" .Values.agent.listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}
