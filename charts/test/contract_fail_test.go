package charttest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bagkeeper/bagkeeper/charts/test/render"
)

// TestContractChecksFail breaks each point of the contract in a rendered
// chart and expects the check of that point to fail: a check that cannot
// fail checks nothing.
func TestContractChecksFail(t *testing.T) {
	needChart(t)
	sts := tc{kube: "1.31.0", workload: "StatefulSet", persistence: true, replicas: 3}
	sts5 := tc{kube: "1.31.0", workload: "StatefulSet", persistence: true, replicas: 5}
	old := tc{kube: "1.28.0", workload: "StatefulSet", persistence: false, replicas: 3}
	dep := tc{kube: "1.31.0", workload: "Deployment", persistence: false, replicas: 3}
	one := tc{kube: "1.31.0", workload: "StatefulSet", persistence: true, replicas: 1}
	tls := tc{kube: "1.31.0", workload: "StatefulSet", persistence: true, replicas: 3, tls: true, certManager: true}

	setArg := func(r *rendered, flag, value string) {
		c := sidecarOf(r)
		for i, a := range c.Args {
			if strings.HasPrefix(a, flag+"=") {
				c.Args[i] = flag + "=" + value
				return
			}
		}
		t.Fatalf("no %s to change", flag)
	}
	dropArg := func(r *rendered, flag string) {
		c := sidecarOf(r)
		var out []string
		for _, a := range c.Args {
			if !strings.HasPrefix(a, flag+"=") && a != flag {
				out = append(out, a)
			}
		}
		c.Args = out
	}
	charm := func(r *rendered) *corev1.Container {
		cs := charmContainers(&r.template().Spec, sidecarOf(r))
		if len(cs) == 0 {
			t.Fatal("no charm container")
		}
		for i := range r.template().Spec.Containers {
			if r.template().Spec.Containers[i].Name == cs[0].Name {
				return &r.template().Spec.Containers[i]
			}
		}
		return nil
	}

	for _, m := range []struct {
		name   string
		c      tc
		check  string // the check that must fail
		mutate func(r *rendered)
	}{
		{"chart label in the selector", sts, "labels", func(r *rendered) {
			r.sts.Spec.Selector.MatchLabels["helm.sh/chart"] = "x"
			r.template().Labels["helm.sh/chart"] = "x"
		}},
		{"selector not on the pods", sts, "labels", func(r *rendered) { r.sts.Spec.Selector.MatchLabels["extra"] = "x" }},
		{"test pod matches the selector", sts, "labels", func(r *rendered) {
			for k, v := range r.sts.Spec.Selector.MatchLabels {
				r.testPods[0].Labels[k] = v
			}
		}},
		{"OrderedReady", sts, "workload", func(r *rendered) { r.sts.Spec.PodManagementPolicy = "OrderedReady" }},
		{"serviceName", sts, "workload", func(r *rendered) { r.sts.Spec.ServiceName = "other" }},
		{"maxSurge", dep, "workload", func(r *rendered) {
			v := intstr.FromString("25%")
			r.deploy.Spec.Strategy.RollingUpdate.MaxSurge = &v
		}},
		{"no claim with persistence", sts, "data volume", func(r *rendered) {
			r.sts.Spec.VolumeClaimTemplates = nil
			r.sts.Spec.Template.Spec.Volumes = append(r.sts.Spec.Template.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}},
		{"data not an emptyDir", dep, "data volume", func(r *rendered) {
			v := volume(&r.deploy.Spec.Template.Spec, "data")
			v.EmptyDir = nil
			v.HostPath = &corev1.HostPathVolumeSource{Path: "/data"}
		}},
		{"bootstrap-expect", sts5, "sidecar flags", func(r *rendered) { setArg(r, "--bootstrap-expect", "5") }},
		{"units", dep, "sidecar flags", func(r *rendered) { setArg(r, "--units", "5") }},
		{"units on a StatefulSet", sts, "sidecar flags", func(r *rendered) { sidecarOf(r).Args = append(sidecarOf(r).Args, "--units=3") }},
		{"advertise", sts, "sidecar flags", func(r *rendered) { setArg(r, "--advertise", "$(POD_IP):7400") }},
		{"plain sidecar on 1.31", sts, "native sidecar", func(r *rendered) {
			s := r.template().Spec
			c := *sidecarOf(r)
			var ics []corev1.Container
			for _, ic := range s.InitContainers {
				if ic.Name != c.Name {
					ics = append(ics, ic)
				}
			}
			c.RestartPolicy = nil
			r.template().Spec.InitContainers = ics
			r.template().Spec.Containers = append(s.Containers, c)
		}},
		{"no startup probe", sts, "native sidecar", func(r *rendered) { sidecarOf(r).StartupProbe = nil }},
		{"native sidecar on 1.28", old, "native sidecar", func(r *rendered) {
			always := corev1.ContainerRestartPolicyAlways
			r.template().Spec.InitContainers[0].RestartPolicy = &always
		}},
		{"lifecycle sleep on 1.28", old, "fields the version has", func(r *rendered) {
			sidecarOf(r).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
		}},
		{"charm without the socket", sts, "hook tools socket", func(r *rendered) {
			c := charm(r)
			var ms []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if m.MountPath != "/run/bagkeeper" {
					ms = append(ms, m)
				}
			}
			c.VolumeMounts = ms
		}},
		{"charm user not allowed on the socket", sts, "hook tools socket", func(r *rendered) {
			u := int64(4242)
			charm(r).SecurityContext.RunAsUser = &u
		}},
		{"data on a read-only mount", sts, "paths on volumes", func(r *rendered) {
			c := sidecarOf(r)
			for i, m := range c.VolumeMounts {
				if m.Name == "data" {
					c.VolumeMounts[i].ReadOnly = true
				}
			}
		}},
		{"unused volume", sts, "paths on volumes", func(r *rendered) {
			r.template().Spec.Volumes = append(r.template().Spec.Volumes, corev1.Volume{Name: "spare", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}},
		{"pod uid", sts, "downward API", func(r *rendered) {
			for i, e := range sidecarOf(r).Env {
				if e.Name == "POD_UID" {
					sidecarOf(r).Env[i].ValueFrom.FieldRef.FieldPath = "metadata.name"
				}
			}
		}},
		{"undefined $(VAR)", sts, "downward API", func(r *rendered) { setArg(r, "--app", "$(APP_NAME)") }},
		{"not-ready addresses", sts, "headless service", func(r *rendered) { headlessOf(r).Spec.PublishNotReadyAddresses = false }},
		{"unnamed port", sts, "headless service", func(r *rendered) { headlessOf(r).Spec.Ports[0].Name = "" }},
		{"readiness on healthz", sts, "probes", func(r *rendered) { sidecarOf(r).ReadinessProbe.HTTPGet.Path = "/healthz" }},
		{"liveness on leadership", sts, "probes", func(r *rendered) {
			sidecarOf(r).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}}
		}},
		{"short grace period", sts, "termination", func(r *rendered) {
			g := int64(10)
			r.template().Spec.TerminationGracePeriodSeconds = &g
		}},
		{"budget loses the quorum", sts5, "disruption budget", func(r *rendered) {
			v := intstr.FromInt32(3)
			r.pdbs[0].Spec.MaxUnavailable = &v
		}},
		{"budget blocks drains", sts, "disruption budget", func(r *rendered) {
			v := intstr.FromInt32(0)
			r.pdbs[0].Spec.MaxUnavailable = &v
		}},
		{"single voter with a budget", one, "disruption budget", func(r *rendered) {
			r.pdbs = append(r.pdbs, renderCase(t, sts).pdbs...)
		}},
		{"token automounted", sts, "no API access", func(r *rendered) { r.template().Spec.AutomountServiceAccountToken = nil }},
		{"a Role", sts, "no API access", func(r *rendered) {
			r.res.Docs = append(r.res.Docs, render.Doc{Kind: "Role", APIVersion: "rbac.authorization.k8s.io/v1", Name: "x"})
		}},
		{"writable root", sts, "security context", func(r *rendered) {
			f := false
			charm(r).SecurityContext.ReadOnlyRootFilesystem = &f
		}},
		{"capabilities kept", sts, "security context", func(r *rendered) { sidecarOf(r).SecurityContext.Capabilities = nil }},
		{"privilege escalation", sts, "security context", func(r *rendered) {
			y := true
			r.template().Spec.InitContainers[0].SecurityContext.AllowPrivilegeEscalation = &y
		}},
		{"host path volume (pod security only)", sts, "security context", func(r *rendered) {
			r.template().Spec.Volumes = append(r.template().Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}},
		{"no memory limit", sts, "memory limit", func(r *rendered) {
			sidecarOf(r).Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}},
		{"checksum annotation", sts, "config maps", func(r *rendered) {
			r.template().Annotations = map[string]string{"checksum/config": "abc"}
		}},
		{"subPath", sts, "config maps", func(r *rendered) {
			c := sidecarOf(r)
			for i, m := range c.VolumeMounts {
				if v := volume(&r.template().Spec, m.Name); v != nil && v.ConfigMap != nil {
					c.VolumeMounts[i].SubPath = "config.yaml"
				}
			}
		}},
		{"insecure", sts, "peer protection", func(r *rendered) { sidecarOf(r).Args = append(sidecarOf(r).Args, "--insecure") }},
		{"no join token", sts, "peer protection", func(r *rendered) { dropArg(r, "--join-token-file") }},
		{"join token secret not rendered", sts, "peer protection", func(r *rendered) { r.secrets = nil }},
		{"no tls-ca", tls, "peer protection", func(r *rendered) { dropArg(r, "--tls-ca") }},
		{"tls file not in the secret", tls, "peer protection", func(r *rendered) { setArg(r, "--tls-key", "/etc/bagkeeper/tls/key.pem") }},
		{"certificate fills another secret", tls, "peer protection", func(r *rendered) { r.certs[0].Spec.SecretName = "other" }},
		{"certificate misses the pods' names", tls, "peer protection", func(r *rendered) { r.certs[0].Spec.DNSNames = []string{"example.com"} }},
		{"notes", sts, "notes", func(r *rendered) { r.res.Notes = "installed" }},
		{"test pod", sts, "helm test", func(r *rendered) { r.testPods[0].Spec.Containers[0].Command = []string{"true"} }},
	} {
		t.Run(m.name, func(t *testing.T) {
			r := renderCase(t, m.c)
			m.mutate(r)
			rec := &recorder{failures: map[string][]string{}}
			rec.run("", func(t tb) { checkContract(t, r) })
			if len(rec.failures[m.check]) == 0 {
				t.Errorf("check %q did not fail; failures: %v", m.check, rec.failures)
			}
		})
	}
}

func sidecarOf(r *rendered) *corev1.Container {
	s := &r.template().Spec
	for i := range s.InitContainers {
		if isSidecar(&s.InitContainers[i]) {
			return &s.InitContainers[i]
		}
	}
	for i := range s.Containers {
		if isSidecar(&s.Containers[i]) {
			return &s.Containers[i]
		}
	}
	return nil
}

func headlessOf(r *rendered) *corev1.Service {
	for _, s := range r.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			return s
		}
	}
	return nil
}
