{{/* The labels of every object of the release. */}}
{{- define "kubewasm.labels" -}}
app.kubernetes.io/name: kubewasm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kubewasm
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The labels selecting the host's Pods. */}}
{{- define "kubewasm.selector" -}}
app.kubernetes.io/name: kubewasm
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The host config file: the config value with its apiVersion and kind. */}}
{{- define "kubewasm.config" -}}
{{- $config := deepCopy .Values.config | default dict -}}
{{- $_ := set $config "apiVersion" "kubewasm.io/v1alpha1" -}}
{{- $_ := set $config "kind" "HostConfig" -}}
{{ toYaml $config }}
{{- end }}

{{/* `kubewasm probe PATH` on the address the host wrote (host network). */}}
{{- define "kubewasm.execProbe" -}}
exec:
  command: ["/kubewasm", "probe", {{ . | quote }}, "--addr-file", "/run/kubewasm/metrics-addr"]
{{- end }}

{{/* The cache volume's claim, when it has one. */}}
{{- define "kubewasm.cacheClaim" -}}
{{- if .Values.cache.persistence.existingClaim -}}
{{ .Values.cache.persistence.existingClaim }}
{{- else -}}
{{ .Release.Name }}-cache
{{- end -}}
{{- end }}
