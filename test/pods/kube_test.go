package pods

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The few Kubernetes types the tests read, decoded with encoding/json from
// the rendered YAML. Local structs rather than k8s.io/api: the tests read a
// small part of the pod template and need no client.

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type object struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   objectMeta        `json:"metadata"`
	Spec       json.RawMessage   `json:"spec"`
	Data       map[string]string `json:"data"`
	StringData map[string]string `json:"stringData"`
}

type workloadSpec struct {
	Replicas             *int          `json:"replicas"`
	ServiceName          string        `json:"serviceName"`
	Template             podTemplate   `json:"template"`
	VolumeClaimTemplates []pvcTemplate `json:"volumeClaimTemplates"`
}

type pvcTemplate struct {
	Metadata objectMeta `json:"metadata"`
}

type podTemplate struct {
	Metadata objectMeta `json:"metadata"`
	Spec     podSpec    `json:"spec"`
}

type podSpec struct {
	InitContainers                []container         `json:"initContainers"`
	Containers                    []container         `json:"containers"`
	Volumes                       []volume            `json:"volumes"`
	SecurityContext               *podSecurityContext `json:"securityContext"`
	TerminationGracePeriodSeconds *int64              `json:"terminationGracePeriodSeconds"`
	Hostname                      string              `json:"hostname"`
	Subdomain                     string              `json:"subdomain"`
	EnableServiceLinks            *bool               `json:"enableServiceLinks"`
}

type podSecurityContext struct {
	RunAsUser          *int64  `json:"runAsUser"`
	RunAsGroup         *int64  `json:"runAsGroup"`
	FSGroup            *int64  `json:"fsGroup"`
	RunAsNonRoot       *bool   `json:"runAsNonRoot"`
	SupplementalGroups []int64 `json:"supplementalGroups"`
}

type container struct {
	Name            string           `json:"name"`
	Image           string           `json:"image"`
	Command         []string         `json:"command"`
	Args            []string         `json:"args"`
	WorkingDir      string           `json:"workingDir"`
	Env             []envVar         `json:"env"`
	EnvFrom         []envFromSource  `json:"envFrom"`
	Ports           []containerPort  `json:"ports"`
	VolumeMounts    []volumeMount    `json:"volumeMounts"`
	Resources       resources        `json:"resources"`
	SecurityContext *securityContext `json:"securityContext"`
	StartupProbe    *probe           `json:"startupProbe"`
	ReadinessProbe  *probe           `json:"readinessProbe"`
	LivenessProbe   *probe           `json:"livenessProbe"`
	Lifecycle       *lifecycle       `json:"lifecycle"`
	RestartPolicy   string           `json:"restartPolicy"`
}

type envVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value"`
	ValueFrom *envVarSource `json:"valueFrom"`
}

type envVarSource struct {
	FieldRef *struct {
		FieldPath string `json:"fieldPath"`
	} `json:"fieldRef"`
	SecretKeyRef     *keyRef `json:"secretKeyRef"`
	ConfigMapKeyRef  *keyRef `json:"configMapKeyRef"`
	ResourceFieldRef *struct {
		Resource string `json:"resource"`
		Divisor  string `json:"divisor"`
	} `json:"resourceFieldRef"`
}

type keyRef struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Optional *bool  `json:"optional"`
}

type envFromSource struct {
	Prefix       string  `json:"prefix"`
	ConfigMapRef *keyRef `json:"configMapRef"`
	SecretRef    *keyRef `json:"secretRef"`
}

type containerPort struct {
	Name          string `json:"name"`
	ContainerPort int    `json:"containerPort"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly"`
	SubPath   string `json:"subPath"`
}

type resources struct {
	Limits   map[string]string `json:"limits"`
	Requests map[string]string `json:"requests"`
}

type securityContext struct {
	RunAsUser                *int64 `json:"runAsUser"`
	RunAsGroup               *int64 `json:"runAsGroup"`
	RunAsNonRoot             *bool  `json:"runAsNonRoot"`
	ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
	Privileged               *bool  `json:"privileged"`
	Capabilities             *struct {
		Add  []string `json:"add"`
		Drop []string `json:"drop"`
	} `json:"capabilities"`
	SeccompProfile *struct {
		Type string `json:"type"`
	} `json:"seccompProfile"`
}

type probe struct {
	HTTPGet *struct {
		Path   string      `json:"path"`
		Port   intOrString `json:"port"`
		Scheme string      `json:"scheme"`
	} `json:"httpGet"`
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec"`
	TCPSocket *struct {
		Port intOrString `json:"port"`
	} `json:"tcpSocket"`
	InitialDelaySeconds int `json:"initialDelaySeconds"`
	PeriodSeconds       int `json:"periodSeconds"`
	TimeoutSeconds      int `json:"timeoutSeconds"`
	FailureThreshold    int `json:"failureThreshold"`
}

type lifecycle struct {
	PreStop *struct {
		Exec *struct {
			Command []string `json:"command"`
		} `json:"exec"`
		Sleep *struct {
			Seconds int `json:"seconds"`
		} `json:"sleep"`
	} `json:"preStop"`
}

type intOrString string

func (v *intOrString) UnmarshalJSON(b []byte) error {
	*v = intOrString(strings.Trim(string(b), `"`))
	return nil
}

type keyToPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

type volume struct {
	Name     string `json:"name"`
	EmptyDir *struct {
		Medium    string `json:"medium"`
		SizeLimit string `json:"sizeLimit"`
	} `json:"emptyDir"`
	ConfigMap *struct {
		Name        string      `json:"name"`
		Items       []keyToPath `json:"items"`
		Optional    *bool       `json:"optional"`
		DefaultMode *int        `json:"defaultMode"`
	} `json:"configMap"`
	Secret *struct {
		SecretName  string      `json:"secretName"`
		Items       []keyToPath `json:"items"`
		DefaultMode *int        `json:"defaultMode"`
		Optional    *bool       `json:"optional"`
	} `json:"secret"`
	PersistentVolumeClaim *struct {
		ClaimName string `json:"claimName"`
	} `json:"persistentVolumeClaim"`
	Projected *struct {
		Sources []struct {
			ConfigMap *struct {
				Name  string      `json:"name"`
				Items []keyToPath `json:"items"`
			} `json:"configMap"`
			Secret *struct {
				Name  string      `json:"name"`
				Items []keyToPath `json:"items"`
			} `json:"secret"`
		} `json:"sources"`
	} `json:"projected"`
}

type serviceSpec struct {
	ClusterIP                string `json:"clusterIP"`
	PublishNotReadyAddresses bool   `json:"publishNotReadyAddresses"`
	Ports                    []struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	} `json:"ports"`
}

// manifests is what one render produced.
type manifests struct {
	kind       string // StatefulSet or Deployment
	name       string
	replicas   int
	workload   workloadSpec
	headless   string // the headless service's name
	configMaps map[string]map[string][]byte
	secrets    map[string]map[string][]byte
}

// parseManifests decodes multi-document YAML (yaml -> generic -> JSON ->
// the structs above) and picks the workload, its headless service, the
// ConfigMaps and the Secrets.
func parseManifests(doc []byte) (*manifests, error) {
	m := &manifests{configMaps: map[string]map[string][]byte{}, secrets: map[string]map[string][]byte{}}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var services []object
	for {
		var raw any
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("rendered YAML: %w", err)
		}
		if raw == nil {
			continue
		}
		js, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var o object
		if err := json.Unmarshal(js, &o); err != nil {
			return nil, fmt.Errorf("%.80s: %w", js, err)
		}
		switch o.Kind {
		case "StatefulSet", "Deployment":
			if m.kind != "" {
				return nil, fmt.Errorf("two workloads: %s and %s %s", m.name, o.Kind, o.Metadata.Name)
			}
			m.kind, m.name = o.Kind, o.Metadata.Name
			if err := json.Unmarshal(o.Spec, &m.workload); err != nil {
				return nil, fmt.Errorf("%s %s: %w", o.Kind, o.Metadata.Name, err)
			}
			m.replicas = 1
			if m.workload.Replicas != nil {
				m.replicas = *m.workload.Replicas
			}
		case "Service":
			services = append(services, o)
		case "ConfigMap":
			d := map[string][]byte{}
			for k, v := range o.Data {
				d[k] = []byte(v)
			}
			m.configMaps[o.Metadata.Name] = d
		case "Secret":
			d := map[string][]byte{}
			for k, v := range o.Data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return nil, fmt.Errorf("secret %s key %s: %w", o.Metadata.Name, k, err)
				}
				d[k] = b
			}
			for k, v := range o.StringData {
				d[k] = []byte(v)
			}
			m.secrets[o.Metadata.Name] = d
		}
	}
	if m.kind == "" {
		return nil, fmt.Errorf("no StatefulSet or Deployment rendered")
	}
	for _, s := range services {
		var spec serviceSpec
		if err := json.Unmarshal(s.Spec, &spec); err != nil {
			return nil, err
		}
		if spec.ClusterIP != "None" {
			continue
		}
		if m.workload.ServiceName == "" || m.workload.ServiceName == s.Metadata.Name {
			m.headless = s.Metadata.Name
		}
	}
	if m.headless == "" {
		m.headless = m.workload.ServiceName
	}
	if m.headless == "" {
		return nil, fmt.Errorf("no headless service (clusterIP: None) rendered")
	}
	return m, nil
}

// sidecars are the init containers that run beside the main containers
// (Kubernetes 1.29+ native sidecars).
func (s *podSpec) isSidecar(c *container) bool { return c.RestartPolicy == "Always" }

// parseMemory turns a Kubernetes quantity (128Mi, 1G, 500000) into bytes.
func parseMemory(q string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if strings.HasSuffix(q, u.suffix) {
			n, err := strconv.ParseFloat(strings.TrimSuffix(q, u.suffix), 64)
			return int64(n * float64(u.mult)), err
		}
	}
	n, err := strconv.ParseFloat(q, 64)
	return int64(n), err
}

// parseCPU turns a CPU quantity (500m, 1, 0.25) into cores.
func parseCPU(q string) (float64, error) {
	if strings.HasSuffix(q, "m") {
		n, err := strconv.ParseFloat(strings.TrimSuffix(q, "m"), 64)
		return n / 1000, err
	}
	return strconv.ParseFloat(q, 64)
}

// expand does Kubernetes' dependent variable expansion of command, args and
// env values: $(NAME) becomes NAME's value when NAME is defined and stays as
// it is otherwise; $$ is a literal $.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
