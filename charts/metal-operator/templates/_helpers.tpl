{{/*
Shared pieces of the chart's templates. Object names are fixed (those of config/): the CRDs and
ClusterRoles are cluster-wide anyway, so one release per cluster.
*/}}

{{/* The labels of every object: the kustomize ones (name, optional component) plus Helm's. Call with (dict "ctx" $ "component" "manager"). */}}
{{- define "metal-operator.labels" -}}
app.kubernetes.io/name: metal-operator
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version }}
{{- end }}

{{/* Selector labels of a component's pods (equal to config/'s, so kustomize and Helm installs select alike). */}}
{{- define "metal-operator.selectorLabels" -}}
app.kubernetes.io/name: metal-operator
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* The operator image reference. */}}
{{- define "metal-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* imagePullPolicy, when one is set. */}}
{{- define "metal-operator.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
NODE_OPTIONS' V8 heap limit: 75 % of a container's limits.memory (Mi or Gi), in MiB. Without it V8
sizes its heap from the node's memory, not the container's (config/manager/manager.yaml). Call with
the resources map; fails the render on a limit in another unit or none.
*/}}
{{- define "metal-operator.heapMiB" -}}
{{- $mem := toString (dig "limits" "memory" "" .) -}}
{{- if regexMatch "^[0-9]+Mi$" $mem -}}
{{- div (mul (trimSuffix "Mi" $mem | atoi) 3) 4 -}}
{{- else if regexMatch "^[0-9]+Gi$" $mem -}}
{{- div (mul (trimSuffix "Gi" $mem | atoi) 3072) 4 -}}
{{- else -}}
{{- fail (printf "resources.limits.memory must be set in Mi or Gi (the V8 heap limit is 75 %% of it), got %q" $mem) -}}
{{- end -}}
{{- end }}

{{/* --tls-cert-file / --tls-key-file when tls.secretName is set. */}}
{{- define "metal-operator.tlsArgs" -}}
{{- if .Values.tls.secretName }}
- --tls-cert-file=/etc/metal-operator/tls/tls.crt
- --tls-key-file=/etc/metal-operator/tls/tls.key
{{- end }}
{{- end }}

{{- define "metal-operator.tlsMount" -}}
{{- if .Values.tls.secretName }}
- { name: tls, mountPath: /etc/metal-operator/tls, readOnly: true }
{{- end }}
{{- end }}

{{- define "metal-operator.tlsVolume" -}}
{{- with .Values.tls.secretName }}
- name: tls
  secret: { secretName: {{ . | quote }} }
{{- end }}
{{- end }}

{{/* LOG_LEVEL for the registry / boot server when logLevel is set (they have no --log-level). */}}
{{- define "metal-operator.logLevelEnv" -}}
{{- with .Values.logLevel }}
- name: LOG_LEVEL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* An env var from ConfigMap metal-boot-network. Call with (list "NAME" "key"). */}}
{{- define "metal-operator.bootNetworkEnv" -}}
- name: {{ index . 0 }}
  valueFrom: { configMapKeyRef: { name: metal-boot-network, key: {{ index . 1 }} } }
{{- end }}
