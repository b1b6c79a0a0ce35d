{{/*
Names and labels, as charts users know them (dcgm-exporter, kube-prometheus-stack).

oomlens.fullname: fullnameOverride, else the release name when it already contains the chart's
name (`helm install oomlens …` → "oomlens"), else "<release>-<chart>"; at most 63 characters.
Every object is "<fullname>-<component>".
*/}}
{{- define "oomlens.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "oomlens.fullname" -}}
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

{{/* Selector labels of a component: (dict "ctx" $ "component" "agent"). Never change them:
     selectors are immutable. */}}
{{- define "oomlens.selectorLabels" -}}
app.kubernetes.io/name: {{ include "oomlens.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of a component's objects. */}}
{{- define "oomlens.labels" -}}
{{ include "oomlens.selectorLabels" . }}
app.kubernetes.io/part-of: oomlens
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* An image reference: (dict "ctx" $ "image" .Values.agent.image); the tag defaults to the
     chart's appVersion. */}}
{{- define "oomlens.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The collector's in-cluster DNS name (agents connect to it; its certificate carries it). */}}
{{- define "oomlens.collectorHost" -}}
{{- printf "%s-collector.%s.svc" (include "oomlens.fullname" .) .Release.Namespace -}}
{{- end -}}
