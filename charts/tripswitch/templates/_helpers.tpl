{{- define "tripswitch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tripswitch.labels" -}}
app.kubernetes.io/name: tripswitch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tripswitch.selector" -}}
app.kubernetes.io/name: tripswitch
app.kubernetes.io/component: controller
{{- end -}}

{{- define "tripswitch.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace .Values.serviceAccount.name -}}
{{- end -}}

{{- define "tripswitch.subject" -}}
- kind: ServiceAccount
  name: {{ .Values.serviceAccount.name }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

