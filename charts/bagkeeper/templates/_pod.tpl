{{/*
The pod: the sidecar, the init containers that prepare the volumes it
shares with the charm container, and those volumes.

Layout of every pod (paths are fixed; the values say what goes in them):
  /var/lib/bagkeeper        data: raft log, snapshots, identity, admin socket
                            (a volume claim, or an emptyDir with
                            persistence.enabled=false: peers refill it)
  /run/bagkeeper            the hook tools' socket (agent.sock), shared with
                            the charm container; fsGroup lets both use it
  /bagkeeper                bin/bagkeeper, bin/jujuc and tools/ (the hook
                            tools), copied for the charm container's image
  /var/lib/juju/charm       the charm, copied from the charm's image
  /etc/bagkeeper/charm-config   the charm config (ConfigMap, hot-reloaded)
  /etc/bagkeeper/relations      the relations file (ConfigMap, hot-reloaded)
  /etc/bagkeeper/tls            tls.crt, tls.key, ca.crt (Secret, reloaded)
  /etc/bagkeeper/join-token     token (Secret), when TLS is off
*/}}

{{/* bagkeeper.containerSecurityContext: restricted, for every container. */}}
{{- define "bagkeeper.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* bagkeeper.podSecurityContext */}}
{{- define "bagkeeper.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* bagkeeper.sidecarArgs: the sidecar's command line. */}}
{{- define "bagkeeper.sidecarArgs" -}}
{{- $headless := include "bagkeeper.headless" . -}}
{{- $domain := .Values.clusterDomain -}}
{{- $p := .Values.sidecar.ports -}}
- run
- --app={{ include "bagkeeper.app" . }}
- --model-name=$(POD_NAMESPACE)
- --pod-name=$(POD_NAME)
- --pod-uid=$(POD_UID)
- --pod-ip=$(POD_IP)
- --bind=0.0.0.0:{{ $p.raft }}
- --advertise=$(POD_NAME).{{ $headless }}.$(POD_NAMESPACE).svc.{{ $domain }}:{{ $p.raft }}
- --discovery-dns={{ $headless }}.$(POD_NAMESPACE).svc.{{ $domain }}
- --http-bind=0.0.0.0:{{ $p.http }}
- --relations-bind=0.0.0.0:{{ $p.relations }}
- --data-dir=/var/lib/bagkeeper
- --bootstrap-expect={{ include "bagkeeper.voters" . }}
- --voters={{ include "bagkeeper.voters" . }}
{{- if eq .Values.workload "Deployment" }}
{{- /* A StatefulSet's ordinals are its scale: --units is for pods without
   one, and left out there, scaling a StatefulSet restarts no pod. */}}
- --units={{ .Values.replicas }}
{{- end }}
- --unit-takeover-after={{ .Values.sidecar.unitTakeoverAfter }}
- --hook-runner=remote
- --agent-socket=/run/bagkeeper/agent.sock
{{- if ne (int .Values.charm.runAsUser) (int .Values.securityContext.runAsUser) }}
- --hook-uids={{ .Values.charm.runAsUser }}
{{- end }}
- --charm-dir=/var/lib/juju/charm
- --charm-config=/etc/bagkeeper/charm-config/config.yaml
- --relations-file=/etc/bagkeeper/relations/relations.yaml
{{- if .Values.tls.enabled }}
- --tls-cert=/etc/bagkeeper/tls/tls.crt
- --tls-key=/etc/bagkeeper/tls/tls.key
- --tls-ca=/etc/bagkeeper/tls/ca.crt
{{- else }}
- --join-token-file=/etc/bagkeeper/join-token/token
{{- end }}
- --log-level={{ .Values.sidecar.logLevel }}
- --log-format={{ .Values.sidecar.logFormat }}
{{- range .Values.sidecar.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* bagkeeper.downwardEnv: the pod's identity, from the downward API. */}}
{{- define "bagkeeper.downwardEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
{{- end -}}

{{/*
bagkeeper.sidecarContainer: the sidecar. As a native sidecar it has
restartPolicy: Always and a startup probe, so the charm container starts
once the hook tools' socket is up. Readiness means caught up with the
group (not "a leader is known"); liveness only that the process answers,
never leadership or peers, which a restart cannot fix. On SIGTERM it runs
the stop hook, releases a Deployment pod's unit, hands leadership over and
leaves: terminationGracePeriodSeconds leaves room for that.
*/}}
{{- define "bagkeeper.sidecarContainer" -}}
- name: bagkeeper
  image: {{ include "bagkeeper.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if include "bagkeeper.native" . }}
  restartPolicy: Always
  {{- end }}
  command: [/bin/bagkeeper]
  args:
    {{- include "bagkeeper.sidecarArgs" . | nindent 4 }}
  env:
    {{- include "bagkeeper.downwardEnv" . | nindent 4 }}
  ports:
    - name: raft
      containerPort: {{ .Values.sidecar.ports.raft }}
      protocol: TCP
    - name: http
      containerPort: {{ .Values.sidecar.ports.http }}
      protocol: TCP
    - name: relations
      containerPort: {{ .Values.sidecar.ports.relations }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /startupz
      port: http
    periodSeconds: 1
    failureThreshold: 120
  readinessProbe:
    httpGet:
      path: /readyz
      port: http
    periodSeconds: 2
    failureThreshold: 2
  livenessProbe:
    httpGet:
      path: /healthz
      port: http
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 6
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- include "bagkeeper.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: data
      mountPath: /var/lib/bagkeeper
    - name: run
      mountPath: /run/bagkeeper
    - name: charm
      mountPath: /var/lib/juju/charm
      readOnly: true
    - name: charm-config
      mountPath: /etc/bagkeeper/charm-config
      readOnly: true
    - name: relations
      mountPath: /etc/bagkeeper/relations
      readOnly: true
    {{- if .Values.tls.enabled }}
    - name: tls
      mountPath: /etc/bagkeeper/tls
      readOnly: true
    {{- else }}
    - name: join-token
      mountPath: /etc/bagkeeper/join-token
      readOnly: true
    {{- end }}
{{- end -}}

{{/*
bagkeeper.initContainers: the pod's init containers, in order: copy the
binaries, copy the charm, then (native) the sidecar.
*/}}
{{- define "bagkeeper.initContainers" -}}
- name: bagkeeper-install
  image: {{ include "bagkeeper.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [/bin/bagkeeper, install, --to, /bagkeeper]
  resources:
    {{- toYaml .Values.initResources | nindent 4 }}
  securityContext:
    {{- include "bagkeeper.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: bagkeeper-bin
      mountPath: /bagkeeper
- name: charm-init
  image: {{ include "bagkeeper.charmImage" . }}
  imagePullPolicy: {{ default .Values.image.pullPolicy .Values.charm.image.pullPolicy }}
  command: [/bagkeeper/bin/bagkeeper, install, --charm, {{ .Values.charm.dir | quote }}, --charm-to, /var/lib/juju/charm]
  resources:
    {{- toYaml .Values.initResources | nindent 4 }}
  securityContext:
    {{- include "bagkeeper.containerSecurityContext" . | nindent 4 }}
    runAsUser: {{ .Values.charm.runAsUser }}
  volumeMounts:
    - name: bagkeeper-bin
      mountPath: /bagkeeper
      readOnly: true
    - name: charm
      mountPath: /var/lib/juju/charm
{{- if include "bagkeeper.native" . }}
{{ include "bagkeeper.sidecarContainer" . }}
{{- end }}
{{- end -}}

{{/* bagkeeper.containers: the sidecar as a plain container (Kubernetes before 1.29). */}}
{{- define "bagkeeper.containers" -}}
{{- if not (include "bagkeeper.native" .) -}}
{{- include "bagkeeper.sidecarContainer" . }}
{{- end -}}
{{- end -}}

{{/*
bagkeeper.hookRunner: command and args for the charm container's main
process: it runs the hooks the sidecar sends, with the hook tools first on
their PATH. On SIGTERM it asks the agent to run the stop hook first.
*/}}
{{- define "bagkeeper.hookRunner" -}}
command: [/bagkeeper/bin/bagkeeper, hook-runner]
args:
  - --agent-socket=/run/bagkeeper/agent.sock
  - --charm-dir=/var/lib/juju/charm
  - --hook-tool=/bagkeeper/bin/jujuc
  - --tools-dir=/bagkeeper/tools
  - --name=$(POD_NAME)
{{- end -}}

{{/* bagkeeper.charmVolumeMounts: what the charm container mounts. */}}
{{- define "bagkeeper.charmVolumeMounts" -}}
- name: run
  mountPath: /run/bagkeeper
- name: bagkeeper-bin
  mountPath: /bagkeeper
- name: charm
  mountPath: /var/lib/juju/charm
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* bagkeeper.volumes: the pod's volumes (data too when persistence is off). */}}
{{- define "bagkeeper.volumes" -}}
{{- $full := include "bagkeeper.fullname" . -}}
{{- if not (and .Values.persistence.enabled (eq .Values.workload "StatefulSet")) -}}
- name: data
  emptyDir:
    sizeLimit: {{ .Values.persistence.size }}
{{ end -}}
- name: run
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: bagkeeper-bin
  emptyDir:
    sizeLimit: 64Mi
- name: charm
  emptyDir:
    sizeLimit: {{ .Values.charm.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
- name: charm-config
  configMap:
    name: {{ $full }}-charm-config
- name: relations
  configMap:
    name: {{ $full }}-relations
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "bagkeeper.tlsSecret" . }}
    defaultMode: 0440
{{- else }}
- name: join-token
  secret:
    secretName: {{ include "bagkeeper.joinTokenSecret" . }}
    defaultMode: 0440
    items:
      - key: token
        path: token
{{- end }}
{{- end -}}

{{/* bagkeeper.volumeClaimTemplates: the data volume of a StatefulSet pod. */}}
{{- define "bagkeeper.volumeClaimTemplates" -}}
{{- if and .Values.persistence.enabled (eq .Values.workload "StatefulSet") -}}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata:
    name: data
    labels:
      {{- include "bagkeeper.selectorLabels" . | nindent 6 }}
  spec:
    accessModes:
      {{- toYaml .Values.persistence.accessModes | nindent 6 }}
    {{- if .Values.persistence.storageClassName }}
    storageClassName: {{ .Values.persistence.storageClassName | quote }}
    {{- end }}
    resources:
      requests:
        storage: {{ .Values.persistence.size }}
{{- end }}
{{- end -}}

{{/* bagkeeper.scheduling: anti-affinity and topology spread over the application's pods. */}}
{{- define "bagkeeper.scheduling" -}}
{{- if eq .Values.antiAffinity "soft" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "bagkeeper.selectorLabels" . | nindent 14 }}
{{- else if eq .Values.antiAffinity "hard" -}}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "bagkeeper.selectorLabels" . | nindent 12 }}
{{- end }}
{{- if .Values.topologySpread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ .Values.topologySpread.maxSkew }}
    topologyKey: {{ .Values.topologySpread.topologyKey }}
    whenUnsatisfiable: {{ .Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "bagkeeper.selectorLabels" . | nindent 8 }}
{{- end }}
{{- end -}}
