{{/*
The objects around the workload. Each template renders one whole document
(or nothing, when its value turns it off).
*/}}

{{/*
bagkeeper.headlessService: gives every pod a DNS name
(<pod>.<fullname>-peers.<namespace>.svc.<clusterDomain>) and lists every pod,
ready or not, under <fullname>-peers: a pod that is not ready yet must be
found by its peers to catch up.
*/}}
{{- define "bagkeeper.headlessService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "bagkeeper.headless" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "bagkeeper.labels" . | nindent 4 }}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    {{- include "bagkeeper.selectorLabels" . | nindent 4 }}
  ports:
    - name: raft
      port: {{ .Values.sidecar.ports.raft }}
      targetPort: raft
      protocol: TCP
    - name: http
      port: {{ .Values.sidecar.ports.http }}
      targetPort: http
      protocol: TCP
    - name: relations
      port: {{ .Values.sidecar.ports.relations }}
      targetPort: relations
      protocol: TCP
{{- end -}}

{{/*
bagkeeper.podDisruptionBudget: a voluntary disruption (a node drain) never
takes more pods than the group can lose and keep a quorum of its voters:
(voters - 1) / 2 at a time, counting every pod as a possible voter. A single
pod has no quorum to keep: no budget is made for it (one with
maxUnavailable 0 would block every drain).
*/}}
{{- define "bagkeeper.podDisruptionBudget" -}}
{{- $voters := int (include "bagkeeper.voters" .) -}}
{{- if and .Values.podDisruptionBudget.enabled (gt $voters 1) -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "bagkeeper.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "bagkeeper.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ div (sub $voters 1) 2 }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "bagkeeper.selectorLabels" . | nindent 6 }}
{{- end -}}
{{- end -}}

{{/*
bagkeeper.configMaps: the charm config (what config-get answers) and the
relations file. Both are mounted as directories and hot-reloaded by the
sidecar: a change fires config-changed, or makes or drops relations,
without restarting a pod, so the pod template carries no checksum of them.
*/}}
{{- define "bagkeeper.configMaps" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "bagkeeper.fullname" . }}-charm-config
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "bagkeeper.labels" . | nindent 4 }}
data:
  config.yaml: |
    {{- if .Values.charm.config }}
    {{- toYaml .Values.charm.config | nindent 4 }}
    {{- else }}
    # no settings: every option has the charm's default
    {{- end }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "bagkeeper.fullname" . }}-relations
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "bagkeeper.labels" . | nindent 4 }}
data:
  relations.yaml: |
    {{- if .Values.relations }}
    {{- toYaml .Values.relations | nindent 4 }}
    {{- else }}
    # no offers and no relations with other applications
    {{- end }}
{{- end -}}

{{/*
bagkeeper.joinTokenSecret: with TLS off, every member must present the same
join token. Unless joinToken.existingSecret names one, the chart makes it
once and keeps it across upgrades.
*/}}
{{- define "bagkeeper.joinToken" -}}
{{- if and (not .Values.tls.enabled) (not .Values.joinToken.existingSecret) -}}
{{- $name := include "bagkeeper.joinTokenSecret" . -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace $name -}}
apiVersion: v1
kind: Secret
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "bagkeeper.labels" . | nindent 4 }}
type: Opaque
data:
  {{- if and $old $old.data $old.data.token }}
  token: {{ $old.data.token }}
  {{- else }}
  token: {{ randAlphaNum 48 | b64enc }}
  {{- end }}
{{- end -}}
{{- end -}}

{{/*
bagkeeper.certificate: with tls.certManager.enabled, a cert-manager
Certificate that fills the TLS secret (tls.crt, tls.key, ca.crt) and renews
it; the sidecars reload it without a restart. Members verify each other
against ca.crt only, so one certificate serves every pod.
*/}}
{{- define "bagkeeper.certificate" -}}
{{- if and .Values.tls.enabled .Values.tls.certManager.enabled -}}
{{- $headless := include "bagkeeper.headless" . -}}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ include "bagkeeper.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "bagkeeper.labels" . | nindent 4 }}
spec:
  secretName: {{ include "bagkeeper.tlsSecret" . }}
  commonName: {{ include "bagkeeper.app" . }}
  dnsNames:
    - "*.{{ $headless }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}"
    - "{{ $headless }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}"
  # The relations port (relations with other applications) wants the
  # application's name in its certificate.
  uris:
    - "bagkeeper://app/{{ include "bagkeeper.app" . }}"
  duration: {{ .Values.tls.certManager.duration }}
  renewBefore: {{ .Values.tls.certManager.renewBefore }}
  privateKey:
    algorithm: ECDSA
    size: 256
    rotationPolicy: Always
  usages:
    - server auth
    - client auth
  issuerRef:
    {{- toYaml .Values.tls.certManager.issuerRef | nindent 4 }}
{{- end -}}
{{- end -}}

{{/*
bagkeeper.testPod: `helm test` asks a sidecar of the release, through the
headless service, for the group's status, and fails unless a raft leader is
known and every voter answers.
*/}}
{{- define "bagkeeper.testPod" -}}
{{- if .Values.tests.enabled -}}
apiVersion: v1
kind: Pod
metadata:
  name: {{ include "bagkeeper.fullname" . }}-test-status
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/component: test
    {{- include "bagkeeper.commonLabels" . | nindent 4 }}
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    {{- include "bagkeeper.podSecurityContext" . | nindent 4 }}
  containers:
    - name: status
      image: {{ include "bagkeeper.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command:
        - /bin/bagkeeper
        - status
        - --url=http://{{ include "bagkeeper.headless" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.sidecar.ports.http }}
        - --check
      resources:
        {{- toYaml .Values.initResources | nindent 8 }}
      securityContext:
        {{- include "bagkeeper.containerSecurityContext" . | nindent 8 }}
{{- end -}}
{{- end -}}
