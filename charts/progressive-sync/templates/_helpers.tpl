{{/* Common names and labels. */}}
{{- define "progressive-sync.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "progressive-sync.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "progressive-sync.image" -}}
{{- $repository := required "image.repository is required: no registry publishes the progressive-sync image; set image.repository to where you pushed `make image`'s output (e.g. --set image.repository=registry.example.com/platform/progressive-sync)" .Values.image.repository -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- /*
The namespaces the watcher watches, space-separated (how `watch` reads PROGRESSIVE_SYNC_NAMESPACE).
The watcher creates every Workflow in workflowNamespace and the steps read their ProgressiveSync
from the Workflow's namespace, so it may only watch that one namespace: anything else would make
the watcher refuse to start, so the chart refuses it first.
*/ -}}
{{- define "progressive-sync.watchNamespaces" -}}
{{- $watched := .Values.watchNamespaces | default (list .Values.argocdNamespace) -}}
{{- if ne (join " " $watched) .Values.workflowNamespace -}}
{{- fail (printf "watchNamespaces %v: the watcher creates Workflows in workflowNamespace (%s) and the steps read their ProgressiveSync from there, so it can only watch that namespace; set watchNamespaces to [%s] (with an empty watchNamespaces it watches argocdNamespace, %s)" $watched .Values.workflowNamespace .Values.workflowNamespace .Values.argocdNamespace) -}}
{{- end -}}
{{- join " " $watched -}}
{{- end -}}

{{- /*
A Role and its RoleBinding: dict name, namespace, labels (text), subject (dict), rules (list).
*/ -}}
{{- define "progressive-sync.role" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- .labels | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- .labels | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - {{- toYaml .subject | nindent 4 }}
{{- end -}}

{{- /*
The namespaces where ApplicationSets (and the Applications they generate, in the same namespace)
may be: the workflow namespace (a ProgressiveSync's own, the default of spec.appSetRef.namespace)
and the Argo CD namespace. Space-separated, without repeats.
*/ -}}
{{- define "progressive-sync.appNamespaces" -}}
{{- list .Values.workflowNamespace .Values.argocdNamespace | uniq | join " " -}}
{{- end -}}

{{- define "progressive-sync.stepsUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Values.workflowNamespace .Values.steps.serviceAccountName -}}
{{- end -}}

{{- define "progressive-sync.watcherUsername" -}}
{{- printf "system:serviceaccount:%s:%s-watcher" .Release.Namespace (include "progressive-sync.fullname" .) -}}
{{- end -}}
