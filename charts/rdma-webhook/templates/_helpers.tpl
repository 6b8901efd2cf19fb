{{/* Names: release "rdma-webhook" gives every object the name kustomize's deploy/ gives it. */}}
{{- define "rdma-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rdma-webhook.fullname" -}}
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

{{/* Labels of every object (deploy/ has the first two). */}}
{{- define "rdma-webhook.labels" -}}
app.kubernetes.io/name: {{ include "rdma-webhook.name" . }}
app.kubernetes.io/part-of: rdma-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The webhook pods: selected by the Service, the PDB, the spread constraints. */}}
{{- define "rdma-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rdma-webhook.name" . }}
app.kubernetes.io/component: webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rdma-webhook.tlsSecretName" -}}
{{- if eq .Values.certificates.source "provided" -}}
{{- .Values.certificates.provided.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "rdma-webhook.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "rdma-webhook.policiesConfigMapName" -}}
{{- if .Values.policies.existingConfigMap -}}
{{- .Values.policies.existingConfigMap -}}
{{- else -}}
{{- printf "%s-policies" (include "rdma-webhook.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The catalogue: policies/<name>.yaml shipped in the chart. */}}
{{- define "rdma-webhook.catalogue" -}}
{{- $names := list -}}
{{- range $path, $_ := .Files.Glob "policies/*.yaml" -}}
{{- $names = append $names (base $path | trimSuffix ".yaml") -}}
{{- end -}}
{{- $names | sortAlpha | join "," -}}
{{- end -}}

{{/* The policy files in force: {file name: content}, as YAML. */}}
{{- define "rdma-webhook.policyFiles" -}}
{{- $files := dict -}}
{{- $catalogue := splitList "," (include "rdma-webhook.catalogue" .) -}}
{{- range .Values.policies.enabled -}}
{{- if not (has . $catalogue) -}}
{{- fail (printf "policies.enabled: %q is not in the chart's catalogue (%s); give your own policy under policies.inline instead" . (join ", " $catalogue)) -}}
{{- end -}}
{{- $_ := set $files (printf "%s.yaml" .) ($.Files.Get (printf "policies/%s.yaml" .)) -}}
{{- end -}}
{{- range $name, $text := .Values.policies.inline -}}
{{- $file := ternary $name (printf "%s.yaml" $name) (or (hasSuffix ".yaml" $name) (hasSuffix ".yml" $name)) -}}
{{- if hasKey $files $file -}}
{{- fail (printf "policies.inline: %q has the name of a catalogue policy enabled in policies.enabled; rename it" $name) -}}
{{- end -}}
{{- $_ := set $files $file $text -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{/* clientConfig of one webhook: the Service, or webhook.url (a process outside the cluster). */}}
{{- define "rdma-webhook.clientConfig" -}}
{{- $ := .ctx -}}
{{- if $.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $.Values.webhook.url) .path | quote }}
{{- else }}
service:
  name: {{ include "rdma-webhook.fullname" $ }}
  namespace: {{ $.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- if .caBundle }}
caBundle: {{ .caBundle }}
{{- end }}
{{- end -}}
