{{/*
Names and labels. Every template of this library takes the including
chart's root context (.) and reads the values documented in
charts/bagkeeper/README.md.
*/}}

{{/*
bagkeeper.fullname: the name of the workload and its objects: .Values.app
when set, else fullnameOverride, else <release>-<chart> (the release name
alone when it already contains the chart's name).
*/}}
{{- define "bagkeeper.fullname" -}}
{{- if .Values.app -}}
{{- .Values.app -}}
{{- else if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
bagkeeper.app: the Juju application name (units are <app>/N). It is the
workload's name too: pod <app>-N of a StatefulSet is unit <app>/N.
*/}}
{{- define "bagkeeper.app" -}}
{{- include "bagkeeper.fullname" . -}}
{{- end -}}

{{/* bagkeeper.headless: the headless service that gives every pod its DNS name. */}}
{{- define "bagkeeper.headless" -}}
{{- printf "%s-peers" (include "bagkeeper.fullname" .) -}}
{{- end -}}

{{/*
bagkeeper.selectorLabels: what the workload, the service and the disruption
budget select pods by. They never change over the release's life (a
StatefulSet's selector is immutable), so no version is in them.
*/}}
{{- define "bagkeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: unit
{{- end -}}

{{/* bagkeeper.labels: selector labels plus the ones that may change. */}}
{{- define "bagkeeper.labels" -}}
{{ include "bagkeeper.selectorLabels" . }}
{{ include "bagkeeper.commonLabels" . }}
{{- end -}}

{{/*
bagkeeper.commonLabels: the labels of objects that are not the units' pods
(the test pod must not match the units' selector).
*/}}
{{- define "bagkeeper.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "bagkeeper.app" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* bagkeeper.image: the bagkeeper image reference. */}}
{{- define "bagkeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* bagkeeper.charmImage: the charm's image (default: the bagkeeper image, which holds the demo charm). */}}
{{- define "bagkeeper.charmImage" -}}
{{- if .Values.charm.image.repository -}}
{{- printf "%s:%s" .Values.charm.image.repository (default "latest" .Values.charm.image.tag) -}}
{{- else -}}
{{- include "bagkeeper.image" . -}}
{{- end -}}
{{- end -}}

{{/*
bagkeeper.voters: how many voters the group keeps: sidecar.voters, but
never more than the pods there are, and odd.
*/}}
{{- define "bagkeeper.voters" -}}
{{- $v := min (int .Values.sidecar.voters) (int .Values.replicas) -}}
{{- if eq (mod $v 2) 0 }}{{ sub $v 1 }}{{ else }}{{ $v }}{{ end -}}
{{- end -}}

{{/*
bagkeeper.native: "true" when the sidecar runs as a native sidecar (an init
container with restartPolicy: Always, Kubernetes 1.29 and later), so that it
starts before the charm container and stops after it.
*/}}
{{- define "bagkeeper.native" -}}
{{- $mode := toString .Values.sidecar.native -}}
{{- $supported := semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version -}}
{{- if and (eq $mode "true") (not $supported) -}}
{{- fail (printf "sidecar.native=true needs Kubernetes 1.29 or later (native sidecars); this cluster is %s: use auto or false" .Capabilities.KubeVersion.Version) -}}
{{- else if eq $mode "true" -}}true
{{- else if and (eq $mode "auto") (semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version) -}}true
{{- end -}}
{{- end -}}

{{/* bagkeeper.joinTokenSecret: the Secret holding the join token (TLS off). */}}
{{- define "bagkeeper.joinTokenSecret" -}}
{{- default (printf "%s-join-token" (include "bagkeeper.fullname" .)) .Values.joinToken.existingSecret -}}
{{- end -}}

{{/* bagkeeper.tlsSecret: the Secret holding tls.crt, tls.key and ca.crt. */}}
{{- define "bagkeeper.tlsSecret" -}}
{{- default (printf "%s-tls" (include "bagkeeper.fullname" .)) .Values.tls.secretName -}}
{{- end -}}
