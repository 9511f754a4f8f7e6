// Package charttest checks the Helm charts (charts/bagkeeper, the library,
// through charts/bagkeeper-demo, the application that includes it): helm
// lint, every rendered document decoded strictly into its Kubernetes type
// and validated by Kubernetes' own validation (see package kube), the pods
// against the restricted Pod Security Standard, and one check per point of
// the chart's contract, each shown to fail on a chart that breaks it
// (TestContractChecksFail). Run: go -C charts/test test ./... (make
// chart-test).
package charttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/bagkeeper/bagkeeper/charts/test/kube"
	"github.com/bagkeeper/bagkeeper/charts/test/render"
)

// The application chart under test; it includes the library chart
// charts/bagkeeper through the symlink charts/bagkeeper-demo/charts/bagkeeper.
const demoChart = "../bagkeeper-demo"

const (
	release   = "web"
	namespace = "apps"
	// The chart's defaults these tests rely on (values.yaml).
	defaultVoters = 3
	// docs/operations.md, "Graceful termination": terminationGracePeriodSeconds
	// must cover the longest hook (the sidecar kills a running hook 30 s after
	// the stop began) plus the stop hook plus 30 s.
	minGracePeriod = 30 + 30
)

func needChart(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(demoChart, "Chart.yaml")); err != nil {
		t.Skipf("no chart at %s: %v", demoChart, err)
	}
}

// tc is one point of the matrix.
type tc struct {
	kube        string // Kubernetes version
	workload    string // StatefulSet or Deployment
	persistence bool
	replicas    int
	tls         bool           // mutual TLS from a Secret
	certManager bool           // the Secret from a cert-manager Certificate
	voters      int            // sidecar.voters; 0: the chart's default
	release     string         // the release name; "" is the package's release
	extra       map[string]any // more values, merged over the others
	label       string         // names a case with extra values
}

func (c tc) String() string {
	s := fmt.Sprintf("kube%s,%s,replicas=%d,persistence=%t", c.kube, c.workload, c.replicas, c.persistence)
	if c.tls {
		s += ",tls"
	}
	if c.certManager {
		s += "+cert-manager"
	}
	if c.voters != 0 {
		s += fmt.Sprintf(",voters=%d", c.voters)
	}
	if c.label != "" {
		s += "," + c.label
	}
	return s
}

func (c tc) values() map[string]any {
	v := map[string]any{
		"workload":    c.workload,
		"replicas":    c.replicas,
		"persistence": map[string]any{"enabled": c.persistence},
	}
	if c.tls {
		t := map[string]any{"enabled": true}
		if c.certManager {
			t["certManager"] = map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "bagkeeper-ca", "kind": "Issuer", "group": "cert-manager.io"}}
		}
		v["tls"] = t
	}
	if c.voters != 0 {
		v["sidecar"] = map[string]any{"voters": c.voters}
	}
	return merge(v, c.extra)
}

// voters is what the chart documents (charts/bagkeeper/templates/_names.tpl,
// bagkeeper.voters): sidecar.voters, never more than the pods, and odd.
func (c tc) groupVoters() int {
	v := defaultVoters
	if c.voters != 0 {
		v = c.voters
	}
	v = min(v, c.replicas)
	if v%2 == 0 {
		v--
	}
	return v
}

func (c tc) releaseName() string {
	if c.release != "" {
		return c.release
	}
	return release
}

// merge returns b merged over a, tables key by key.
func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		bv, bok := v.(map[string]any)
		av, aok := out[k].(map[string]any)
		if bok && aok {
			out[k] = merge(av, bv)
		} else {
			out[k] = v
		}
	}
	return out
}

// value returns the value at a dotted path of the values the templates saw.
func (r *rendered) value(p string) any {
	var v any = r.res.Values
	for _, k := range strings.Split(p, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func matrix() []tc {
	var cases []tc
	for _, k := range []string{"1.28.0", "1.31.0"} {
		for _, p := range []bool{true, false} {
			for _, w := range []string{"StatefulSet", "Deployment"} {
				for _, r := range []int{1, 3, 5} {
					cases = append(cases, tc{kube: k, workload: w, persistence: p, replicas: r})
				}
			}
		}
	}
	for _, k := range []string{"1.28.0", "1.31.0"} {
		for _, w := range []string{"StatefulSet", "Deployment"} {
			cases = append(cases,
				tc{kube: k, workload: w, persistence: true, replicas: 3, tls: true},
				tc{kube: k, workload: w, persistence: true, replicas: 3, tls: true, certManager: true},
				tc{kube: k, workload: w, persistence: true, replicas: 5, voters: 5},
				tc{kube: k, workload: w, persistence: true, replicas: 4, voters: 5})
		}
	}
	return cases
}

// rendered is one render, decoded.
type rendered struct {
	c        tc
	res      *render.Result
	objs     []any // decoded, in the order of res.Docs
	sts      *appsv1.StatefulSet
	deploy   *appsv1.Deployment
	services []*corev1.Service
	cms      []*corev1.ConfigMap
	secrets  []*corev1.Secret
	pdbs     []*policyv1.PodDisruptionBudget
	testPods []*corev1.Pod
	certs    []*kube.Certificate
}

func (r *rendered) template() *corev1.PodTemplateSpec {
	if r.sts != nil {
		return &r.sts.Spec.Template
	}
	return &r.deploy.Spec.Template
}

func (r *rendered) selector() *metav1.LabelSelector {
	if r.sts != nil {
		return r.sts.Spec.Selector
	}
	return r.deploy.Spec.Selector
}

// TestChart lints, renders, decodes, validates and checks the chart over
// the matrix.
func TestChart(t *testing.T) {
	needChart(t)
	for _, c := range matrix() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			lintChart(t, c.kube, c.values())
			r := renderCase(t, c)
			checkContract(t, r)
		})
	}
}

// lintChart runs helm lint (pkg/lint: Chart.yaml, values and the schema,
// templates rendered strictly) and fails on any error or warning.
func lintChart(t *testing.T, kubeVersion string, vals map[string]any) {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	l := lint.AllWithKubeVersion(demoChart, vals, namespace, kv)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m.Error())
		} else {
			t.Logf("helm lint: %s", m.Error())
		}
	}
}

func renderCase(t *testing.T, c tc) *rendered {
	t.Helper()
	res, err := render.Render(render.Options{Chart: demoChart, KubeVersion: c.kube, Release: c.releaseName(), Namespace: namespace, Values: c.values()})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r := &rendered{c: c, res: res}
	for _, d := range res.Docs {
		obj, err := kube.DecodeStrict(d.APIVersion, d.Kind, d.Content)
		if err != nil {
			t.Errorf("%s: %v", d.Source, err)
			r.objs = append(r.objs, nil)
			continue
		}
		r.objs = append(r.objs, obj)
		errs, err := kube.Validate(obj, namespace)
		if err != nil {
			t.Errorf("%s %s/%s: %v", d.Source, d.Kind, d.Name, err)
		}
		for _, e := range errs {
			t.Errorf("%s %s/%s refused by the API server's validation: %v", d.Source, d.Kind, d.Name, e)
		}
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			if r.sts != nil {
				t.Errorf("two StatefulSets")
			}
			r.sts = o
		case *appsv1.Deployment:
			if r.deploy != nil {
				t.Errorf("two Deployments")
			}
			r.deploy = o
		case *corev1.Service:
			r.services = append(r.services, o)
		case *corev1.ConfigMap:
			r.cms = append(r.cms, o)
		case *corev1.Secret:
			r.secrets = append(r.secrets, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *corev1.Pod:
			if !d.Test {
				t.Errorf("%s: a bare Pod that is not a helm test hook", d.Source)
			}
			r.testPods = append(r.testPods, o)
		case *kube.Certificate:
			r.certs = append(r.certs, o)
		default:
			t.Errorf("%s: unexpected %T", d.Source, obj)
		}
	}
	if t.Failed() {
		t.Logf("rendered:\n%s", res.YAML())
		t.FailNow()
	}
	switch {
	case c.workload == "StatefulSet" && (r.sts == nil || r.deploy != nil),
		c.workload == "Deployment" && (r.deploy == nil || r.sts != nil):
		t.Fatalf("want one %s and no other workload", c.workload)
	}
	return r
}

func checkContract(t tb, r *rendered) {
	c := r.c
	tmpl := r.template()
	spec := &tmpl.Spec
	sidecar, native := findSidecar(t, spec)
	args := flagArgs(sidecar)
	headless := headlessService(t, r)

	run(t, "labels", func(t tb) {
		checkSelector(t, "workload", r.selector().MatchLabels, tmpl.Labels, r.res)
		if len(r.selector().MatchExpressions) > 0 {
			t.Errorf("workload selector has matchExpressions: %v", r.selector().MatchExpressions)
		}
		if headless != nil {
			checkSelector(t, "headless service", headless.Spec.Selector, tmpl.Labels, r.res)
		}
		for _, p := range r.pdbs {
			checkSelector(t, "disruption budget", p.Spec.Selector.MatchLabels, tmpl.Labels, r.res)
		}
		for _, p := range r.testPods {
			if subset(r.selector().MatchLabels, p.Labels) {
				t.Errorf("test pod %s matches the units' selector %v: the service and the disruption budget would count it", p.Name, r.selector().MatchLabels)
			}
		}
	})

	run(t, "workload", func(t tb) {
		if c.workload == "StatefulSet" {
			s := r.sts.Spec
			if s.Replicas == nil || int(*s.Replicas) != c.replicas {
				t.Errorf("replicas %v, want %d", s.Replicas, c.replicas)
			}
			if s.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("podManagementPolicy %q, want Parallel", s.PodManagementPolicy)
			}
			if headless == nil || s.ServiceName != headless.Name {
				t.Errorf("serviceName %q is not the headless service", s.ServiceName)
			}
		} else {
			s := r.deploy.Spec
			if s.Replicas == nil || int(*s.Replicas) != c.replicas {
				t.Errorf("replicas %v, want %d", s.Replicas, c.replicas)
			}
			if s.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || s.Strategy.RollingUpdate == nil || s.Strategy.RollingUpdate.MaxSurge == nil {
				t.Errorf("strategy %+v: want RollingUpdate with maxSurge 0", s.Strategy)
			} else if ms := s.Strategy.RollingUpdate.MaxSurge; !isZero(*ms) {
				t.Errorf("maxSurge %s, want 0", ms.String())
			}
		}
	})

	run(t, "data volume", func(t tb) {
		mount := mountFor(sidecar, args["--data-dir"])
		if mount == nil {
			t.Fatalf("--data-dir %q is not on a volume of the sidecar", args["--data-dir"])
			return
		}
		vol := volume(spec, mount.Name)
		claim := false
		if r.sts != nil {
			for _, v := range r.sts.Spec.VolumeClaimTemplates {
				if v.Name == mount.Name {
					claim = true
				}
			}
		}
		wantClaim := c.workload == "StatefulSet" && c.persistence
		switch {
		case wantClaim && !claim:
			t.Errorf("persistence on: no volumeClaimTemplate %q for the data", mount.Name)
		case wantClaim && vol != nil:
			t.Errorf("persistence on: the data volume %q is also a pod volume: %+v", mount.Name, vol.VolumeSource)
		case !wantClaim && claim:
			t.Errorf("a volumeClaimTemplate for the data without persistence on a StatefulSet")
		case !wantClaim && (vol == nil || vol.EmptyDir == nil):
			t.Errorf("the data volume %q is not an emptyDir", mount.Name)
		}
	})

	run(t, "sidecar flags", func(t tb) {
		if got, want := args["--bootstrap-expect"], strconv.Itoa(c.groupVoters()); got != want {
			t.Errorf("--bootstrap-expect=%s, want %s (min(replicas, voters), odd)", got, want)
		}
		if got, want := args["--voters"], strconv.Itoa(c.groupVoters()); got != want {
			t.Errorf("--voters=%s, want %s", got, want)
		}
		// --units: the declared scale, for pods without an ordinal. The
		// chart documents (values.yaml, replicas) that a Deployment's pods
		// get it and a StatefulSet's do not (their ordinals imply it).
		units, ok := args["--units"]
		switch {
		case c.workload == "Deployment" && units != strconv.Itoa(c.replicas):
			t.Errorf("Deployment: --units=%q, want %d (replicas)", units, c.replicas)
		case c.workload == "StatefulSet" && ok:
			t.Errorf("StatefulSet: --units=%s given, which the chart documents it leaves out", units)
		}
		if headless == nil {
			return
		}
		raft := containerPort(sidecar, "raft")
		want := fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.%s:%d", headless.Name, r.value("clusterDomain"), raft)
		if got := args["--advertise"]; got != want {
			t.Errorf("--advertise=%s, want %s", got, want)
		}
		if got := args["--bind"]; !strings.HasSuffix(got, ":"+strconv.Itoa(raft)) {
			t.Errorf("--bind=%s is not the raft port %d", got, raft)
		}
	})

	run(t, "native sidecar", func(t tb) {
		// sidecar.native: auto (the default) is native from 1.29 on;
		// true or false force it (the chart documents it).
		wantNative := c.kube >= "1.29"
		switch fmt.Sprint(r.value("sidecar.native")) {
		case "true":
			wantNative = true
		case "false":
			wantNative = false
		}
		if native != wantNative {
			t.Errorf("kube %s: sidecar is an init container: %t, want %t", c.kube, native, wantNative)
		}
		if native {
			if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("native sidecar without restartPolicy: Always")
			}
			if sidecar.StartupProbe == nil {
				t.Errorf("native sidecar without a startupProbe: the charm container would start before the socket is up")
			}
		} else {
			for _, ic := range spec.InitContainers {
				if ic.RestartPolicy != nil {
					t.Errorf("kube %s: init container %s has restartPolicy (native sidecars need 1.29)", c.kube, ic.Name)
				}
			}
		}
	})

	run(t, "fields the version has", func(t tb) {
		// A field behind a feature gate that is off by default in the
		// target version is dropped by its API server without an error:
		// the object then does something else than it says.
		minor, _ := strconv.Atoi(strings.Split(c.kube, ".")[1])
		need := func(what string, since int) {
			if minor < since {
				t.Errorf("%s needs Kubernetes 1.%d, the target is %s", what, since, c.kube)
			}
		}
		for _, ct := range spec.InitContainers {
			if ct.RestartPolicy != nil {
				need("init container "+ct.Name+" restartPolicy (SidecarContainers)", 29)
			}
		}
		for _, ct := range allContainers(spec) {
			if l := ct.Lifecycle; l != nil && ((l.PreStop != nil && l.PreStop.Sleep != nil) || (l.PostStart != nil && l.PostStart.Sleep != nil)) {
				need("container "+ct.Name+" lifecycle sleep (PodLifecycleSleepAction)", 30)
			}
		}
		if r.sts != nil && r.sts.Spec.PersistentVolumeClaimRetentionPolicy != nil {
			need("persistentVolumeClaimRetentionPolicy (StatefulSetAutoDeletePVC)", 27)
		}
		for _, p := range r.pdbs {
			if p.Spec.UnhealthyPodEvictionPolicy != nil {
				need("unhealthyPodEvictionPolicy (PDBUnhealthyPodEvictionPolicy)", 27)
			}
		}
		for _, s := range r.services {
			if s.Spec.TrafficDistribution != nil {
				need("service "+s.Name+" trafficDistribution (ServiceTrafficDistribution)", 31)
			}
		}
	})

	run(t, "hook tools socket", func(t tb) {
		sock := args["--agent-socket"]
		if sock == "" {
			t.Fatal("sidecar has no --agent-socket")
			return
		}
		sm := mountFor(sidecar, sock)
		if sm == nil {
			t.Fatalf("socket %s is on no volume of the sidecar", sock)
			return
		}
		charms := charmContainers(spec, sidecar)
		if len(charms) == 0 {
			t.Fatal("no charm container")
			return
		}
		for _, cc := range charms {
			cm := mountFor(&cc, sock)
			if cm == nil || cm.Name != sm.Name || cm.MountPath != sm.MountPath {
				t.Errorf("charm container %s does not mount the socket volume %s at %s", cc.Name, sm.Name, sm.MountPath)
			}
			if s := flagArgs(&cc)["--agent-socket"]; s != "" && s != sock {
				t.Errorf("charm container %s uses socket %s, the sidecar %s", cc.Name, s, sock)
			}
			// The socket answers its own user and the --hook-uids
			// (docs/kubernetes.md, shared volumes).
			if u, su := runAsUser(spec, &cc), runAsUser(spec, sidecar); u != su {
				uids := strings.Split(args["--hook-uids"], ",")
				found := false
				for _, x := range uids {
					if strings.TrimSpace(x) == strconv.FormatInt(u, 10) {
						found = true
					}
				}
				if !found {
					t.Errorf("charm container %s runs as %d, the sidecar as %d, and --hook-uids=%q does not allow it", cc.Name, u, su, args["--hook-uids"])
				}
			}
		}
	})

	run(t, "paths on volumes", func(t tb) {
		// The root file systems are read-only: what a container writes
		// must be on a writable mount, and what it reads from the pod's
		// shared files on a mount at all.
		writes := map[string]bool{"--data-dir": true, "--agent-socket": true, "--tools-dir": true, "--to": true, "--charm-to": true}
		reads := []string{"--charm-dir", "--charm-config", "--relations-file", "--tls-cert", "--tls-key", "--tls-ca", "--join-token-file", "--hook-tool", "--secrets-key-file"}
		for _, ct := range allContainers(spec) {
			fa := flagArgs(&ct)
			for f := range writes {
				p, ok := fa[f]
				if !ok {
					continue
				}
				m := mountFor(&ct, p)
				if m == nil || m.ReadOnly {
					t.Errorf("container %s: %s=%s is not on a writable volume", ct.Name, f, p)
				}
			}
			for _, f := range reads {
				if p, ok := fa[f]; ok && mountFor(&ct, p) == nil {
					t.Errorf("container %s: %s=%s is on no volume", ct.Name, f, p)
				}
			}
		}
		used := map[string]bool{}
		for _, ct := range allContainers(spec) {
			for _, m := range ct.VolumeMounts {
				used[m.Name] = true
			}
		}
		for _, v := range spec.Volumes {
			if !used[v.Name] {
				t.Errorf("volume %s is mounted by no container", v.Name)
			}
		}
	})

	run(t, "downward API", func(t tb) {
		want := map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_IP": "status.podIP", "POD_UID": "metadata.uid"}
		env := envMap(sidecar)
		for name, fp := range want {
			e, ok := env[name]
			if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != fp {
				t.Errorf("sidecar env %s is not the fieldRef %s: %+v", name, fp, e)
			}
		}
		// $(VAR) in a command or args stays literal unless VAR is in the
		// container's env.
		for _, ct := range allContainers(spec) {
			checkVarRefs(t, ct)
		}
	})

	run(t, "headless service", func(t tb) {
		if headless == nil {
			t.Fatal("no headless service")
			return
		}
		if !headless.Spec.PublishNotReadyAddresses {
			t.Error("publishNotReadyAddresses is not true")
		}
		for _, p := range headless.Spec.Ports {
			if p.Name == "" {
				t.Errorf("port %d has no name", p.Port)
			}
			if p.TargetPort.Type == intstr.String && containerPort(sidecar, p.TargetPort.StrVal) == 0 {
				t.Errorf("port %s targets %q, which no sidecar port is named", p.Name, p.TargetPort.StrVal)
			}
		}
		if raft := containerPort(sidecar, "raft"); raft == 0 || servicePort(headless, raft) == nil {
			t.Errorf("the headless service does not carry the raft port %d", raft)
		}
	})

	run(t, "probes", func(t tb) {
		rp := sidecar.ReadinessProbe
		if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" {
			t.Errorf("sidecar readiness probe is not GET /readyz: %+v", rp)
		}
		for _, ct := range allContainers(spec) {
			if lp := ct.LivenessProbe; lp != nil && (lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz") {
				t.Errorf("container %s: a liveness probe other than GET /healthz (a restart cannot fix peers or leadership): %+v", ct.Name, lp)
			}
			for _, p := range []*corev1.Probe{ct.LivenessProbe, ct.ReadinessProbe, ct.StartupProbe} {
				if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.Type == intstr.String && containerPort(&ct, p.HTTPGet.Port.StrVal) == 0 {
					t.Errorf("container %s: probe port %q is not one of its ports", ct.Name, p.HTTPGet.Port.StrVal)
				}
			}
		}
	})

	run(t, "termination", func(t tb) {
		g := spec.TerminationGracePeriodSeconds
		if g == nil || *g < minGracePeriod {
			t.Errorf("terminationGracePeriodSeconds %v, want >= %d (docs/operations.md: the longest hook plus stop plus 30 s)", g, minGracePeriod)
		}
		for _, ct := range allContainers(spec) {
			if ct.Lifecycle != nil && ct.Lifecycle.PreStop != nil && ct.Lifecycle.PreStop.Sleep != nil && g != nil && ct.Lifecycle.PreStop.Sleep.Seconds >= *g {
				t.Errorf("container %s: preStop sleeps %d s of a %d s grace period", ct.Name, ct.Lifecycle.PreStop.Sleep.Seconds, *g)
			}
		}
	})

	run(t, "disruption budget", func(t tb) {
		if r.value("podDisruptionBudget.enabled") == false {
			if len(r.pdbs) != 0 {
				t.Errorf("podDisruptionBudget.enabled=false and a budget rendered")
			}
			return
		}
		n := c.groupVoters()
		if n == 1 {
			// The chart documents (bagkeeper.podDisruptionBudget) that a
			// single voter gets no budget: maxUnavailable 0 would block
			// every drain.
			if len(r.pdbs) != 0 {
				t.Errorf("a single voter has a disruption budget: %+v", r.pdbs[0].Spec)
			}
			return
		}
		if len(r.pdbs) != 1 {
			t.Fatalf("%d disruption budgets, want 1", len(r.pdbs))
			return
		}
		s := r.pdbs[0].Spec
		quorum := n/2 + 1
		switch {
		case s.MaxUnavailable != nil && s.MinAvailable == nil:
			mu, err := intstr.GetScaledValueFromIntOrPercent(s.MaxUnavailable, c.replicas, true)
			if err != nil {
				t.Fatal(err)
				return
			}
			if mu > n-quorum {
				t.Errorf("maxUnavailable %s of %d voters loses the quorum of %d", s.MaxUnavailable.String(), n, quorum)
			}
			if mu < 1 {
				t.Errorf("maxUnavailable %s blocks every drain", s.MaxUnavailable.String())
			}
		case s.MinAvailable != nil && s.MaxUnavailable == nil:
			ma, err := intstr.GetScaledValueFromIntOrPercent(s.MinAvailable, c.replicas, true)
			if err != nil {
				t.Fatal(err)
				return
			}
			// Every pod may be a voter: the budget must keep a quorum of
			// the voters even if all the disrupted pods are voters.
			if ma-(c.replicas-n) < quorum {
				t.Errorf("minAvailable %s of %d pods (%d voters) loses the quorum of %d", s.MinAvailable.String(), c.replicas, n, quorum)
			}
			if ma >= c.replicas {
				t.Errorf("minAvailable %s blocks every drain", s.MinAvailable.String())
			}
		default:
			t.Errorf("want exactly one of maxUnavailable and minAvailable: %+v", s)
		}
	})

	run(t, "no API access", func(t tb) {
		for i, d := range r.res.Docs {
			switch d.Kind {
			case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount":
				t.Errorf("%s: a %s (the sidecar needs no Kubernetes API)", d.Source, d.Kind)
			}
			_ = i
		}
		specs := map[string]*corev1.PodSpec{"workload": spec}
		for _, p := range r.testPods {
			specs["test pod "+p.Name] = &p.Spec
		}
		for name, s := range specs {
			if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
				t.Errorf("%s: automountServiceAccountToken is not false", name)
			}
		}
	})

	run(t, "security context", func(t tb) {
		specs := map[string]*corev1.PodSpec{"workload": spec}
		metas := map[string]*metav1.ObjectMeta{"workload": &tmpl.ObjectMeta}
		for _, p := range r.testPods {
			specs["test pod "+p.Name] = &p.Spec
			metas["test pod "+p.Name] = &p.ObjectMeta
		}
		minor, _ := strconv.Atoi(strings.Split(c.kube, ".")[1])
		eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
		if err != nil {
			t.Fatal(err)
			return
		}
		for name, s := range specs {
			for _, ct := range allContainers(s) {
				checkRestricted(t, name, s.SecurityContext, ct)
			}
			lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.MajorMinorVersion(1, minor)}
			for _, res := range eval.EvaluatePod(lv, metas[name], s) {
				if !res.Allowed {
					t.Errorf("%s: pod security %s refuses: %s: %s", name, lv.String(), res.ForbiddenReason, res.ForbiddenDetail)
				}
			}
		}
	})

	run(t, "memory limit", func(t tb) {
		if q, ok := sidecar.Resources.Limits[corev1.ResourceMemory]; !ok || q.IsZero() {
			t.Errorf("sidecar has no memory limit: %+v", sidecar.Resources)
		}
	})

	run(t, "config maps", func(t tb) {
		for k := range tmpl.Annotations {
			if strings.HasPrefix(k, "checksum/") {
				t.Errorf("pod template annotation %s: a config change would restart every pod", k)
			}
		}
		mounted := map[string]bool{}
		for _, ct := range allContainers(spec) {
			for _, m := range ct.VolumeMounts {
				v := volume(spec, m.Name)
				if v == nil {
					continue
				}
				if v.ConfigMap != nil || v.Secret != nil || v.Projected != nil {
					mounted[m.Name] = true
					if m.SubPath != "" || m.SubPathExpr != "" {
						t.Errorf("container %s mounts %s with a subPath: updates would not reach it", ct.Name, m.Name)
					}
				}
			}
		}
		for _, cm := range r.cms {
			found := false
			for _, v := range spec.Volumes {
				if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && mounted[v.Name] {
					found = true
				}
			}
			if !found {
				t.Errorf("config map %s is mounted by no container", cm.Name)
			}
		}
		for _, f := range []string{"--charm-config", "--relations-file"} {
			if p := args[f]; p != "" {
				m := mountFor(sidecar, p)
				if m == nil || volume(spec, m.Name) == nil || volume(spec, m.Name).ConfigMap == nil {
					t.Errorf("%s=%s is not in a config map volume", f, p)
				}
			}
		}
	})

	run(t, "peer protection", func(t tb) {
		if _, ok := args["--insecure"]; ok {
			t.Error("the sidecar runs with --insecure")
		}
		if r.value("tls.enabled") == true {
			checkTLS(t, r, spec, sidecar, args, headless)
			for _, f := range []string{"--join-token", "--join-token-file"} {
				if _, ok := args[f]; ok {
					t.Errorf("TLS on and %s given", f)
				}
			}
		} else {
			checkJoinToken(t, r, spec, sidecar, args)
			for _, f := range []string{"--tls-cert", "--tls-key", "--tls-ca"} {
				if _, ok := args[f]; ok {
					t.Errorf("TLS off and %s given", f)
				}
			}
		}
	})

	run(t, "notes", func(t tb) {
		if !strings.Contains(r.res.Notes, "bagkeeper status") {
			t.Errorf("NOTES.txt does not mention `bagkeeper status`:\n%s", r.res.Notes)
		}
		if strings.Contains(r.res.Notes, "<no value>") || strings.Contains(r.res.Notes, "%!") {
			t.Errorf("NOTES.txt renders a missing value:\n%s", r.res.Notes)
		}
	})

	run(t, "helm test", func(t tb) {
		if r.value("tests.enabled") == false {
			if len(r.testPods) != 0 {
				t.Errorf("tests.enabled=false and a test pod rendered")
			}
			return
		}
		if len(r.testPods) == 0 {
			t.Fatal("no helm test pod")
			return
		}
		for _, p := range r.testPods {
			if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("test pod %s: restartPolicy %q, want Never", p.Name, p.Spec.RestartPolicy)
			}
			runs := false
			for _, ct := range p.Spec.Containers {
				cmd := append(append([]string{}, ct.Command...), ct.Args...)
				for i := 0; i+1 < len(cmd); i++ {
					if path.Base(cmd[i]) == "bagkeeper" && cmd[i+1] == "status" {
						runs = true
					}
				}
				if headless != nil && runs {
					want := fmt.Sprintf("%s.%s.svc.%s:%d", headless.Name, namespace, r.value("clusterDomain"), containerPort(sidecar, "http"))
					if !strings.Contains(strings.Join(cmd, " "), want) {
						t.Errorf("test pod %s does not ask %s: %v", p.Name, want, cmd)
					}
				}
			}
			if !runs {
				t.Errorf("test pod %s does not run `bagkeeper status`", p.Name)
			}
		}
	})
}

// tb is what the contract checks report to: a *testing.T, or a recorder
// (TestContractChecksFail shows that each check fails on a chart that breaks
// its point).
type tb interface {
	Helper()
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// run runs f as subtest name of t.
func run(t tb, name string, f func(t tb)) {
	switch t := t.(type) {
	case *testing.T:
		t.Run(name, func(t *testing.T) { f(t) })
	case *recorder:
		t.run(name, f)
	default:
		panic(fmt.Sprintf("run: %T", t))
	}
}

// recorder is a tb that records the failures of the checks, by subtest.
type recorder struct {
	name     string
	failures map[string][]string // subtest name -> messages
}

type fatal struct{}

func (r *recorder) Helper()                         {}
func (r *recorder) Logf(format string, args ...any) {}
func (r *recorder) Error(args ...any)               { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any) { r.fail(fmt.Sprint(args...)); panic(fatal{}) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
	panic(fatal{})
}
func (r *recorder) fail(msg string) { r.failures[r.name] = append(r.failures[r.name], msg) }

func (r *recorder) run(name string, f func(t tb)) {
	sub := &recorder{name: strings.TrimPrefix(r.name+"/"+name, "/"), failures: r.failures}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(fatal); !ok {
				panic(v)
			}
		}
	}()
	f(sub)
}

// findSidecar returns the container that runs `bagkeeper run`, and whether
// it is an init container.
func findSidecar(t tb, spec *corev1.PodSpec) (*corev1.Container, bool) {
	t.Helper()
	var found *corev1.Container
	native := false
	for i := range spec.InitContainers {
		if isSidecar(&spec.InitContainers[i]) {
			found, native = &spec.InitContainers[i], true
		}
	}
	for i := range spec.Containers {
		if isSidecar(&spec.Containers[i]) {
			if found != nil {
				t.Fatal("two sidecar containers")
			}
			found = &spec.Containers[i]
		}
	}
	if found == nil {
		t.Fatal("no container runs `bagkeeper run`")
	}
	return found, native
}

func isSidecar(c *corev1.Container) bool {
	cmd := append(append([]string{}, c.Command...), c.Args...)
	for i := 0; i+1 < len(cmd); i++ {
		if path.Base(cmd[i]) == "bagkeeper" && cmd[i+1] == "run" {
			return true
		}
	}
	return false
}

// flagArgs maps each --flag=value (or --flag value) of a container's command
// line to its value.
func flagArgs(c *corev1.Container) map[string]string {
	out := map[string]string{}
	cmd := append(append([]string{}, c.Command...), c.Args...)
	for i := 0; i < len(cmd); i++ {
		a := cmd[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
		} else if i+1 < len(cmd) && !strings.HasPrefix(cmd[i+1], "--") {
			out[a] = cmd[i+1]
			i++
		} else {
			out[a] = ""
		}
	}
	return out
}

// runAsUser is the user a container runs as (-1: the image's).
func runAsUser(spec *corev1.PodSpec, c *corev1.Container) int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return *c.SecurityContext.RunAsUser
	}
	if spec.SecurityContext != nil && spec.SecurityContext.RunAsUser != nil {
		return *spec.SecurityContext.RunAsUser
	}
	return -1
}

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
}

// charmContainers are the regular containers other than the sidecar.
func charmContainers(spec *corev1.PodSpec, sidecar *corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.Containers {
		if c.Name != sidecar.Name {
			out = append(out, c)
		}
	}
	return out
}

// mountFor returns the mount of c that holds file path p (the deepest).
func mountFor(c *corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if p == mp || strings.HasPrefix(p, mp+"/") {
			if best == nil || len(mp) > len(best.MountPath) {
				best = &c.VolumeMounts[i]
			}
		}
	}
	return best
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func containerPort(c *corev1.Container, name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	return 0
}

func servicePort(s *corev1.Service, port int) *corev1.ServicePort {
	for i, p := range s.Spec.Ports {
		if int(p.Port) == port {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

func envMap(c *corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func checkVarRefs(t tb, c corev1.Container) {
	t.Helper()
	env := envMap(&c)
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		for rest := a; ; {
			i := strings.Index(rest, "$(")
			if i < 0 {
				break
			}
			j := strings.Index(rest[i:], ")")
			if j < 0 {
				break
			}
			name := rest[i+2 : i+j]
			if _, ok := env[name]; !ok {
				t.Errorf("container %s: %q refers to $(%s), which is not in its env", c.Name, a, name)
			}
			rest = rest[i+j:]
		}
	}
}

func headlessService(t tb, r *rendered) *corev1.Service {
	var out *corev1.Service
	for _, s := range r.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			if out != nil {
				t.Errorf("two headless services: %s and %s", out.Name, s.Name)
			}
			out = s
		}
	}
	return out
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkSelector(t tb, what string, sel, podLabels map[string]string, res *render.Result) {
	t.Helper()
	if len(sel) == 0 {
		t.Errorf("%s: empty selector", what)
	}
	if !subset(sel, podLabels) {
		t.Errorf("%s: selector %v is not a subset of the pod template's labels %v", what, sel, podLabels)
	}
	version := res.Chart.Metadata.Version
	for k, v := range sel {
		if k == "helm.sh/chart" || k == "app.kubernetes.io/version" || strings.Contains(v, version) {
			t.Errorf("%s: selector %s=%s changes with the chart's version (a StatefulSet's selector is immutable)", what, k, v)
		}
	}
}

func isZero(v intstr.IntOrString) bool {
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	return strings.TrimSuffix(v.StrVal, "%") == "0"
}

// checkRestricted checks the restricted profile's settings on one
// container, taking the pod's security context where the container's does
// not say.
func checkRestricted(t tb, pod string, psc *corev1.PodSecurityContext, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: container %s has no securityContext", pod, c.Name)
		return
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil && psc != nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("%s: container %s: runAsNonRoot is not true", pod, c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: container %s: readOnlyRootFilesystem is not true", pod, c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container %s: allowPrivilegeEscalation is not false", pod, c.Name)
	}
	dropAll := false
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			if d == "ALL" {
				dropAll = true
			}
		}
		if len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s adds capabilities %v", pod, c.Name, sc.Capabilities.Add)
		}
	}
	if !dropAll {
		t.Errorf("%s: container %s does not drop ALL capabilities", pod, c.Name)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && psc != nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: container %s: seccompProfile is not RuntimeDefault", pod, c.Name)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: container %s is privileged", pod, c.Name)
	}
}

// secretVolumeFile checks that file p of container c is key of a secret
// volume and returns the secret's name.
func secretVolumeFile(t tb, spec *corev1.PodSpec, c *corev1.Container, flag, p, key string) string {
	t.Helper()
	m := mountFor(c, p)
	if m == nil {
		t.Errorf("%s=%s is on no volume of the sidecar", flag, p)
		return ""
	}
	if m.SubPath != "" {
		t.Errorf("%s: mounted with a subPath", flag)
	}
	v := volume(spec, m.Name)
	if v == nil || v.Secret == nil {
		t.Errorf("%s=%s: volume %s is not a secret", flag, p, m.Name)
		return ""
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(m.MountPath, "/")), "/")
	if len(v.Secret.Items) == 0 {
		if rel != key {
			t.Errorf("%s=%s: the file of key %s would be %s/%s", flag, p, key, m.MountPath, key)
		}
	} else {
		ok := false
		for _, it := range v.Secret.Items {
			if it.Key == key && it.Path == rel {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s=%s: secret volume %s has no item %s -> %s: %+v", flag, p, m.Name, key, rel, v.Secret.Items)
		}
	}
	return v.Secret.SecretName
}

func checkTLS(t tb, r *rendered, spec *corev1.PodSpec, sidecar *corev1.Container, args map[string]string, headless *corev1.Service) {
	t.Helper()
	names := map[string]bool{}
	for flag, key := range map[string]string{"--tls-cert": "tls.crt", "--tls-key": "tls.key", "--tls-ca": "ca.crt"} {
		p, ok := args[flag]
		if !ok || p == "" {
			t.Errorf("TLS on and no %s", flag)
			continue
		}
		names[secretVolumeFile(t, spec, sidecar, flag, p, key)] = true
	}
	if len(names) != 1 {
		t.Errorf("the TLS files come from secrets %v, want one", names)
	}
	var secret string
	for n := range names {
		secret = n
	}
	if r.value("tls.certManager.enabled") != true {
		if len(r.certs) != 0 {
			t.Errorf("a Certificate without tls.certManager.enabled")
		}
		return
	}
	if len(r.certs) != 1 {
		t.Fatalf("%d Certificates, want 1", len(r.certs))
		return
	}
	cert := r.certs[0]
	if cert.Spec.SecretName != secret {
		t.Errorf("the Certificate fills secret %s, the pods mount %s", cert.Spec.SecretName, secret)
	}
	if headless != nil {
		host := fmt.Sprintf("pod-0.%s.%s.svc.%s", headless.Name, namespace, r.value("clusterDomain"))
		if !coversHost(cert.Spec.DNSNames, host) {
			t.Errorf("the Certificate's dnsNames %v do not cover the advertised names (%s)", cert.Spec.DNSNames, host)
		}
	}
	usages := strings.Join(cert.Spec.Usages, ",")
	if len(cert.Spec.Usages) > 0 && (!strings.Contains(usages, "server auth") || !strings.Contains(usages, "client auth")) {
		t.Errorf("mutual TLS needs server auth and client auth, the Certificate has %v", cert.Spec.Usages)
	}
}

func coversHost(names []string, host string) bool {
	for _, n := range names {
		if n == host {
			return true
		}
		if rest, ok := strings.CutPrefix(n, "*."); ok {
			if _, h, ok := strings.Cut(host, "."); ok && h == rest {
				return true
			}
		}
	}
	return false
}

func checkJoinToken(t tb, r *rendered, spec *corev1.PodSpec, sidecar *corev1.Container, args map[string]string) {
	t.Helper()
	p, ok := args["--join-token-file"]
	if !ok || p == "" {
		if _, inline := args["--join-token"]; inline {
			t.Error("the join token is on the command line (--join-token), not in a Secret")
		} else {
			t.Error("TLS off and no --join-token-file")
		}
		return
	}
	key := path.Base(p)
	m := mountFor(sidecar, p)
	if m != nil {
		if v := volume(spec, m.Name); v != nil && v.Secret != nil {
			for _, it := range v.Secret.Items {
				if it.Path == strings.TrimPrefix(strings.TrimPrefix(p, m.MountPath), "/") {
					key = it.Key
				}
			}
		}
	}
	name := secretVolumeFile(t, spec, sidecar, "--join-token-file", p, key)
	if name == "" {
		return
	}
	if existing, _ := r.value("joinToken.existingSecret").(string); existing != "" {
		// The operator's own Secret: mounted, not made.
		if name != existing {
			t.Errorf("joinToken.existingSecret=%s, the pods mount secret %s", existing, name)
		}
		for _, s := range r.secrets {
			if s.Name == existing {
				t.Errorf("the chart renders the operator's existing secret %s", existing)
			}
		}
		return
	}
	for _, s := range r.secrets {
		if s.Name == name {
			if _, ok := s.Data[key]; !ok {
				if _, ok := s.StringData[key]; !ok {
					t.Errorf("secret %s has no key %s", name, key)
				}
			}
			return
		}
	}
	t.Errorf("the join token's secret %s is not rendered", name)
}

// TestValueOptions renders the chart with the values the matrix leaves at
// their defaults and checks the same contract.
func TestValueOptions(t *testing.T) {
	needChart(t)
	base := tc{kube: "1.31.0", workload: "StatefulSet", persistence: true, replicas: 3}
	with := func(c tc, label string, extra map[string]any) tc {
		c.label, c.extra = label, extra
		return c
	}
	dep := base
	dep.workload = "Deployment"
	old := base
	old.kube = "1.28.0"
	long := with(base, "long release name", nil)
	long.release = strings.Repeat("r", 53) // helm's longest
	for _, c := range []tc{
		with(base, "hard anti-affinity and spread", map[string]any{"antiAffinity": "hard", "topologySpread": map[string]any{"enabled": true}}),
		with(dep, "no anti-affinity", map[string]any{"antiAffinity": "none"}),
		with(base, "existing join token", map[string]any{"joinToken": map[string]any{"existingSecret": "operator-token"}}),
		with(dep, "no budget, no tests", map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}, "tests": map[string]any{"enabled": false}}),
		with(base, "charm user and image", map[string]any{"charm": map[string]any{"runAsUser": 1000, "image": map[string]any{"repository": "example/charm", "tag": "1"}}}),
		with(old, "scheduling and metadata", map[string]any{
			"app": "mydb", "imagePullSecrets": []any{map[string]any{"name": "regcred"}},
			"nodeSelector": map[string]any{"disk": "ssd"}, "tolerations": []any{map[string]any{"key": "k", "operator": "Exists", "effect": "NoSchedule"}},
			"priorityClassName": "high", "podAnnotations": map[string]any{"example.com/a": "b"}, "podLabels": map[string]any{"team": "db"},
		}),
		with(base, "charm config", map[string]any{"charm": map[string]any{"config": map[string]any{"greeting": "hi", "port": 5432}}}),
		with(base, "cluster issuer, own secret name, other domain", map[string]any{"clusterDomain": "k8s.example", "tls": map[string]any{"enabled": true, "secretName": "peers-tls",
			"certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "ca", "kind": "ClusterIssuer"}}}}),
		with(base, "plain sidecar forced", map[string]any{"sidecar": map[string]any{"native": false}}),
		with(dep, "extra args", map[string]any{"sidecar": map[string]any{"extraArgs": []any{"--update-status-interval=10m"}}}),
		long,
	} {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			lintChart(t, c.kube, c.values())
			r := renderCase(t, c)
			checkContract(t, r)
		})
	}
}

// TestLintLibrary lints the library chart on its own, as helm lint does.
func TestLintLibrary(t *testing.T) {
	needChart(t)
	l := lint.AllWithKubeVersion(filepath.Join(demoChart, "..", "bagkeeper"), nil, namespace, nil)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint charts/bagkeeper: %s", m.Error())
		} else {
			t.Logf("helm lint charts/bagkeeper: %s", m.Error())
		}
	}
}

// TestSchema checks values.schema.json: self-contained, and refusing bad
// values (the render, like helm install, must fail).
func TestSchema(t *testing.T) {
	needChart(t)
	raw, err := os.ReadFile(filepath.Join(demoChart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var walk func(string, any)
	walk = func(at string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "$ref" || k == "$dynamicRef" {
					if s, _ := x.(string); !strings.HasPrefix(s, "#") {
						t.Errorf("%s: %s %q is not within the schema", at, k, x)
					}
				}
				walk(at+"/"+k, x)
			}
		case []any:
			for i, x := range v {
				walk(at+"/"+strconv.Itoa(i), x)
			}
		}
	}
	walk("", schema)

	bad := map[string][]string{
		"replicas a string":            {"replicas=three"},
		"replicas zero":                {"replicas=0"},
		"workload Pod":                 {"workload=Pod"},
		"unknown top-level key":        {"replicaz=3"},
		"even voters":                  {"sidecar.voters=2"},
		"cert-manager without issuer":  {"tls.enabled=true", "tls.certManager.enabled=true"},
		"grace period below 60 s":      {"terminationGracePeriodSeconds=30"},
		"application name in capitals": {"app=Web"},
	}
	if ap, ok := schema["additionalProperties"].(bool); !ok || ap {
		t.Errorf("the schema allows unknown top-level keys (additionalProperties is not false)")
	}
	for name, sets := range bad {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"1.28.0", "1.31.0"} {
				if _, err := render.Render(render.Options{Chart: demoChart, KubeVersion: k, Release: release, Namespace: namespace, Set: sets}); err == nil {
					t.Errorf("kube %s: rendered with %v", k, sets)
				}
			}
		})
	}
	// A native sidecar forced where Kubernetes has none: an init container
	// that never ends would hold the pod in Init forever.
	if _, err := render.Render(render.Options{Chart: demoChart, KubeVersion: "1.28.0", Release: release, Namespace: namespace, Set: []string{"sidecar.native=true"}}); err == nil || !strings.Contains(err.Error(), "needs Kubernetes 1.29") {
		t.Errorf("sidecar.native=true on 1.28: %v", err)
	}
	if _, err := render.Render(render.Options{Chart: demoChart, KubeVersion: "1.29.0", Release: release, Namespace: namespace, Set: []string{"sidecar.native=true"}}); err != nil {
		t.Errorf("sidecar.native=true on 1.29: %v", err)
	}
	// And the chart's own defaults pass it, with helm lint's defaults too.
	if _, err := render.Render(render.Options{Chart: demoChart, KubeVersion: "1.31.0", Release: release, Namespace: namespace}); err != nil {
		t.Errorf("defaults: %v", err)
	}
	lintChart(t, "1.31.0", nil)
}
