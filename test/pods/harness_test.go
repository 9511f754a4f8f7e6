package pods

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	namespace = "default"
	release   = "web"
	// readyTimeout bounds how long a pod may take to turn ready.
	readyTimeout = 3 * time.Minute
)

// subnets hands each cluster of this test binary a private /24 of its own.
var subnets struct {
	sync.Mutex
	next int
}

// cluster is one rendered workload running as Docker containers on a
// network of its own: what the kubelets and the API server would do with it.
type cluster struct {
	t       *testing.T
	m       *manifests
	spec    *podSpec
	image   string
	id      string // prefix of every Docker object this cluster creates
	network string
	subnet  string // "10.213.N."
	dir     string // host directories of ConfigMap and Secret volumes

	mu     sync.Mutex
	nextIP int
	pods   map[string]*pod
	// secretOverride replaces a Secret's content for one pod (a pod given
	// another CA's certificate).
	secretOverride map[string]map[string]map[string][]byte
	// stoppedLogs keeps the last lines of every container of an
	// incarnation that was stopped and removed: a failure may be explained
	// by what a pod did on its way out.
	stoppedLogs []string
}

// pod is one pod name; its incarnations come and go.
type pod struct {
	c       *cluster
	name    string
	ordinal int

	mu          sync.Mutex
	incarnation int
	uid         string
	ip          string
	pause       string            // the container owning the network namespace
	containers  map[string]string // container name in the spec -> Docker name
	volumes     map[string]string // volume name -> Docker volume or host dir
	projected   map[string]*atomicDir
	running     bool
}

// newCluster starts nothing: it creates the network and reads the manifests.
func newCluster(t *testing.T, m *manifests) *cluster {
	t.Helper()
	subnets.Lock()
	subnets.next++
	n := (os.Getpid()+subnets.next*7)%200 + 20
	subnets.Unlock()
	c := &cluster{
		t: t, m: m, spec: &m.workload.Template.Spec, image: imageRef(),
		id:   "bkpods-" + randHex(4),
		pods: map[string]*pod{}, nextIP: 10,
		dir:            t.TempDir(),
		secretOverride: map[string]map[string]map[string][]byte{},
	}
	c.network = c.id
	var err error
	for tries := 0; ; tries++ {
		c.subnet = fmt.Sprintf("10.213.%d.", n)
		_, err = docker(context.Background(), "network", "create", "--driver", "bridge",
			"--subnet", c.subnet+"0/24", "--label", "bagkeeper-pods-test="+c.id, "--label", "bagkeeper-pods-pid="+strconv.Itoa(os.Getpid()), c.network)
		if err == nil || tries > 20 {
			break
		}
		n = (n+13)%200 + 20 // the subnet is taken: another one
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.cleanup)
	return c
}

func (c *cluster) cleanup() {
	c.mu.Lock()
	pods := make([]*pod, 0, len(c.pods))
	for _, p := range c.pods {
		pods = append(pods, p)
	}
	c.mu.Unlock()
	if c.t.Failed() {
		c.mu.Lock()
		stopped := c.stoppedLogs
		c.mu.Unlock()
		for _, l := range stopped {
			c.t.Log(l)
		}
		for _, p := range pods {
			p.dumpLogs()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, _ := docker(ctx, "ps", "-aq", "--filter", "label=bagkeeper-pods-test="+c.id); out != "" {
		docker(ctx, append([]string{"rm", "-f", "-v"}, strings.Fields(out)...)...)
	}
	if out, _ := docker(ctx, "volume", "ls", "-q", "--filter", "label=bagkeeper-pods-test="+c.id); out != "" {
		docker(ctx, append([]string{"volume", "rm", "-f"}, strings.Fields(out)...)...)
	}
	if _, err := docker(ctx, "network", "rm", c.network); err != nil {
		c.t.Logf("cleanup: %v", err)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// use makes the cluster report to t (a subtest) until the returned function
// restores the previous test.
func (c *cluster) use(t *testing.T) func() {
	prev := c.t
	c.t = t
	return func() { c.t = prev }
}

// pod returns the pod of that name, creating it (not started).
func (c *cluster) pod(name string) *pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pods[name]; ok {
		return p
	}
	p := &pod{c: c, name: name, ordinal: -1}
	if i := strings.LastIndexByte(name, '-'); i >= 0 && c.m.kind == "StatefulSet" {
		if n, err := strconv.Atoi(name[i+1:]); err == nil {
			p.ordinal = n
		}
	}
	c.pods[name] = p
	return p
}

// podNames are the names the workload's pods get: <name>-N for a
// StatefulSet, <name>-<random> for a Deployment.
func (c *cluster) newPodName(i int) string {
	if c.m.kind == "StatefulSet" {
		return fmt.Sprintf("%s-%d", c.m.name, i)
	}
	return fmt.Sprintf("%s-%s-%s", c.m.name, randHex(5)[:10], randHex(3)[:5])
}

// allPods returns the pods in name order.
func (c *cluster) allPods() []*pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*pod
	for _, p := range c.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (c *cluster) allocIP() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextIP++
	if c.nextIP > 250 {
		c.t.Fatalf("out of addresses in %s0/24", c.subnet)
	}
	return c.subnet + strconv.Itoa(c.nextIP)
}

// startAll starts the workload's replicas together (a StatefulSet with
// podManagementPolicy Parallel, as a bootstrap needs) and waits until every
// pod is ready.
func (c *cluster) startAll() []*pod {
	c.t.Helper()
	pods := make([]*pod, c.m.replicas)
	for i := range pods {
		pods[i] = c.pod(c.newPodName(i))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
	for _, p := range pods {
		p.waitReady()
	}
	return pods
}

// labels marks every Docker object of this cluster for the cleanup.
func (c *cluster) labels() []string {
	return []string{"--label", "bagkeeper-pods-test=" + c.id, "--label", "bagkeeper-pods-pid=" + strconv.Itoa(os.Getpid())}
}

// headlessNames are the DNS names of the headless service, as pods look
// them up with and without the cluster domain.
func (c *cluster) serviceNames() []string {
	base := c.m.headless + "." + namespace + ".svc"
	return []string{base + ".cluster.local", base}
}

// dockerName of one container of one incarnation.
func (p *pod) dockerName(container string) string {
	return fmt.Sprintf("%s-%s-%d-%s", p.c.id, p.name, p.incarnation, container)
}

// start starts a new incarnation of the pod: new uid, new address, new
// emptyDirs (and, with keepVolumes false and persistence off, new data);
// the volume claim's volume is kept. It runs the init containers in order,
// starts the sidecars and waits for their startup probes, then the main
// containers. It does not wait for readiness.
func (p *pod) start() error {
	c := p.c
	// Only the fields are set under the lock: the probes below read them.
	p.mu.Lock()
	p.incarnation++
	p.uid = newUID()
	p.ip = c.allocIP()
	p.containers = map[string]string{}
	p.volumes = map[string]string{}
	p.projected = map[string]*atomicDir{}
	p.running = true // from here on, stop removes what was started
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()

	// The pause container: the pod's network namespace and its DNS names.
	p.pause = fmt.Sprintf("%s-%s-%d-pause", c.id, p.name, p.incarnation)
	args := []string{"run", "-d", "--name", p.pause, "--network", c.network, "--ip", p.ip, "--hostname", p.name}
	args = append(args, c.labels()...)
	for _, s := range c.serviceNames() {
		args = append(args, "--network-alias", p.name+"."+s, "--network-alias", s)
	}
	args = append(args, "--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--memory", "16m", "--entrypoint", "/bin/sleep", c.image, "infinity")
	if _, err := docker(ctx, args...); err != nil {
		return fmt.Errorf("pod %s: pause container: %w", p.name, err)
	}
	if err := p.makeVolumes(ctx); err != nil {
		return err
	}
	for _, ic := range c.spec.InitContainers {
		ic := ic
		name, err := p.runContainer(ctx, &ic)
		if err != nil {
			return err
		}
		if !c.spec.isSidecar(&ic) {
			code, err := docker(ctx, "wait", name)
			if err != nil {
				return err
			}
			if code != "0" {
				logs, _ := docker(ctx, "logs", "--tail", "30", name)
				return fmt.Errorf("pod %s: init container %s exited %s:\n%s", p.name, ic.Name, code, logs)
			}
			continue
		}
		if ic.StartupProbe != nil {
			if err := p.waitProbe(ctx, &ic, ic.StartupProbe); err != nil {
				logs, _ := docker(context.Background(), "logs", "--tail", "30", name)
				return fmt.Errorf("pod %s: sidecar %s startup probe: %w\n%s", p.name, ic.Name, err, logs)
			}
		}
	}
	for _, mc := range c.spec.Containers {
		mc := mc
		if _, err := p.runContainer(ctx, &mc); err != nil {
			return err
		}
	}
	return nil
}

// makeVolumes creates the pod's volumes: a Docker volume per emptyDir (this
// incarnation's), a Docker volume per claim (the pod name's, kept), a host
// directory laid out like the kubelet's for each ConfigMap and Secret.
func (p *pod) makeVolumes(ctx context.Context) error {
	c := p.c
	claims := map[string]bool{}
	for _, vct := range c.m.workload.VolumeClaimTemplates {
		claims[vct.Metadata.Name] = true
	}
	vols := append([]volume(nil), c.spec.Volumes...)
	for name := range claims {
		vols = append(vols, volume{Name: name, PersistentVolumeClaim: &struct {
			ClaimName string `json:"claimName"`
		}{name + "-" + p.name}})
	}
	var owned []string
	for _, v := range vols {
		switch {
		case v.EmptyDir != nil:
			dv := fmt.Sprintf("%s-%s-%d-%s", c.id, p.name, p.incarnation, v.Name)
			if _, err := docker(ctx, append(append([]string{"volume", "create"}, c.labels()...), dv)...); err != nil {
				return err
			}
			p.volumes[v.Name] = dv
			owned = append(owned, dv)
		case v.PersistentVolumeClaim != nil:
			dv := fmt.Sprintf("%s-pvc-%s", c.id, v.PersistentVolumeClaim.ClaimName)
			if _, err := docker(ctx, append(append([]string{"volume", "create"}, c.labels()...), dv)...); err != nil {
				return err
			}
			p.volumes[v.Name] = dv
			owned = append(owned, dv)
		case v.ConfigMap != nil, v.Secret != nil, v.Projected != nil:
			files, err := p.projectedFiles(v)
			if err != nil {
				return err
			}
			dir := filepath.Join(c.dir, fmt.Sprintf("%s-%d", p.name, p.incarnation), v.Name)
			ad, err := newAtomicDir(dir, files, c.fileMode(v), c.fsGroup())
			if err != nil {
				return err
			}
			p.projected[v.Name] = ad
			p.volumes[v.Name] = dir
		default:
			return fmt.Errorf("pod %s: volume %s: unsupported source", p.name, v.Name)
		}
	}
	// fsGroup: the volumes group-owned and group-writable, as the kubelet
	// makes them (setgid directories keep the group for new files).
	if sc := c.spec.SecurityContext; sc != nil && sc.FSGroup != nil && len(owned) > 0 {
		args := append([]string{"run", "--rm", "--user", "0:0", "--network", "none"}, c.labels()...)
		var paths []string
		for i, dv := range owned {
			mp := fmt.Sprintf("/v/%d", i)
			args = append(args, "--mount", "type=volume,src="+dv+",dst="+mp)
			paths = append(paths, mp)
		}
		g := strconv.FormatInt(*sc.FSGroup, 10)
		script := fmt.Sprintf("chgrp -R %s %[2]s && chmod -R g+rwX %[2]s && find %[2]s -type d -exec chmod g+s {} +", g, strings.Join(paths, " "))
		args = append(args, "--entrypoint", "/bin/sh", c.image, "-c", script)
		if _, err := docker(ctx, args...); err != nil {
			return fmt.Errorf("pod %s: fsGroup: %w", p.name, err)
		}
	}
	return nil
}

// fileMode is a ConfigMap or Secret volume's defaultMode (0644 unless set).
func (c *cluster) fileMode(v volume) os.FileMode {
	switch {
	case v.Secret != nil && v.Secret.DefaultMode != nil:
		return os.FileMode(*v.Secret.DefaultMode)
	case v.ConfigMap != nil && v.ConfigMap.DefaultMode != nil:
		return os.FileMode(*v.ConfigMap.DefaultMode)
	}
	return 0o644
}

// fsGroup is the pod's fsGroup, or -1.
func (c *cluster) fsGroup() int {
	if sc := c.spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		return int(*sc.FSGroup)
	}
	return -1
}

// projectedFiles are the files of a ConfigMap, Secret or projected volume.
func (p *pod) projectedFiles(v volume) (map[string][]byte, error) {
	c := p.c
	out := map[string][]byte{}
	add := func(data map[string][]byte, items []keyToPath, what string) error {
		if data == nil {
			return fmt.Errorf("pod %s: volume %s: %s not rendered and not given by the test", p.name, v.Name, what)
		}
		if len(items) == 0 {
			for k, b := range data {
				out[k] = b
			}
			return nil
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return fmt.Errorf("pod %s: volume %s: %s has no key %s", p.name, v.Name, what, it.Key)
			}
			out[it.Path] = b
		}
		return nil
	}
	secret := func(name string) map[string][]byte {
		c.mu.Lock()
		defer c.mu.Unlock()
		if o := c.secretOverride[p.name][name]; o != nil {
			return o
		}
		return c.m.secrets[name]
	}
	switch {
	case v.ConfigMap != nil:
		return out, add(c.m.configMaps[v.ConfigMap.Name], v.ConfigMap.Items, "ConfigMap "+v.ConfigMap.Name)
	case v.Secret != nil:
		return out, add(secret(v.Secret.SecretName), v.Secret.Items, "Secret "+v.Secret.SecretName)
	default:
		for _, s := range v.Projected.Sources {
			var err error
			switch {
			case s.ConfigMap != nil:
				err = add(c.m.configMaps[s.ConfigMap.Name], s.ConfigMap.Items, "ConfigMap "+s.ConfigMap.Name)
			case s.Secret != nil:
				err = add(secret(s.Secret.Name), s.Secret.Items, "Secret "+s.Secret.Name)
			}
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// env resolves a container's environment, extending vars (which $(VAR)
// expansion reads) in order as the kubelet does.
func (p *pod) env(ct *container) (map[string]string, []string, error) {
	c := p.c
	vars := map[string]string{}
	var list []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			list = append(list, k)
		}
		vars[k] = v
	}
	for _, ef := range ct.EnvFrom {
		var data map[string][]byte
		switch {
		case ef.ConfigMapRef != nil:
			data = c.m.configMaps[ef.ConfigMapRef.Name]
		case ef.SecretRef != nil:
			data = c.m.secrets[ef.SecretRef.Name]
		}
		for k, v := range data {
			set(ef.Prefix+k, string(v))
		}
	}
	for _, e := range ct.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			switch fp := e.ValueFrom.FieldRef.FieldPath; fp {
			case "metadata.name":
				set(e.Name, p.name)
			case "metadata.namespace":
				set(e.Name, namespace)
			case "metadata.uid":
				set(e.Name, p.uid)
			case "status.podIP":
				set(e.Name, p.ip)
			case "status.hostIP", "status.podIPs", "status.hostIPs":
				set(e.Name, p.ip)
			case "spec.nodeName":
				set(e.Name, "node-0")
			case "spec.serviceAccountName":
				set(e.Name, "default")
			default:
				if strings.HasPrefix(fp, "metadata.labels['") {
					set(e.Name, c.m.workload.Template.Metadata.Labels[strings.TrimSuffix(strings.TrimPrefix(fp, "metadata.labels['"), "']")])
					continue
				}
				return nil, nil, fmt.Errorf("container %s env %s: fieldRef %s not supported", ct.Name, e.Name, fp)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			b, ok := c.m.secrets[r.Name][r.Key]
			if !ok && (r.Optional == nil || !*r.Optional) {
				return nil, nil, fmt.Errorf("container %s env %s: secret %s key %s not rendered", ct.Name, e.Name, r.Name, r.Key)
			}
			set(e.Name, string(b))
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			set(e.Name, string(c.m.configMaps[r.Name][r.Key]))
		case e.ValueFrom.ResourceFieldRef != nil:
			r := e.ValueFrom.ResourceFieldRef
			switch r.Resource {
			case "limits.memory":
				n, _ := parseMemory(ct.Resources.Limits["memory"])
				d, _ := parseMemory(r.Divisor)
				if d <= 0 {
					d = 1
				}
				set(e.Name, strconv.FormatInt((n+d-1)/d, 10))
			case "limits.cpu":
				n, _ := parseCPU(ct.Resources.Limits["cpu"])
				set(e.Name, strconv.Itoa(int(n+0.999)))
			default:
				return nil, nil, fmt.Errorf("container %s env %s: resource %s not supported", ct.Name, e.Name, r.Resource)
			}
		}
	}
	return vars, list, nil
}

// runContainer creates and starts one container of the pod, as the
// kubelet would from its spec.
func (p *pod) runContainer(ctx context.Context, ct *container) (string, error) {
	c := p.c
	name := p.dockerName(ct.Name)
	args := []string{"run", "-d", "--name", name, "--network", "container:" + p.pause}
	args = append(args, c.labels()...)
	args = append(args, "--label", "bagkeeper-pods-pod="+p.name)
	vars, order, err := p.env(ct)
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", p.name, err)
	}
	for _, k := range order {
		args = append(args, "-e", k+"="+vars[k])
	}
	// Security: the pod's then the container's settings.
	var user, group *int64
	var nonRoot *bool
	if sc := c.spec.SecurityContext; sc != nil {
		user, group, nonRoot = sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot
		if sc.FSGroup != nil {
			args = append(args, "--group-add", strconv.FormatInt(*sc.FSGroup, 10))
		}
		for _, g := range sc.SupplementalGroups {
			args = append(args, "--group-add", strconv.FormatInt(g, 10))
		}
	}
	if sc := ct.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			user = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			group = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			args = append(args, "--read-only")
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			args = append(args, "--security-opt", "no-new-privileges")
		}
		if sc.Privileged != nil && *sc.Privileged {
			return "", fmt.Errorf("pod %s: container %s: privileged containers are not run", p.name, ct.Name)
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Drop {
				args = append(args, "--cap-drop", cp)
			}
			for _, cp := range sc.Capabilities.Add {
				args = append(args, "--cap-add", cp)
			}
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type == "Unconfined" {
			args = append(args, "--security-opt", "seccomp=unconfined")
		} // RuntimeDefault: Docker's default profile
	}
	if user != nil {
		u := strconv.FormatInt(*user, 10)
		if group != nil {
			u += ":" + strconv.FormatInt(*group, 10)
		}
		args = append(args, "--user", u)
	}
	if nonRoot != nil && *nonRoot && (user == nil || *user == 0) {
		return "", fmt.Errorf("pod %s: container %s: runAsNonRoot without a non-zero runAsUser (the image's user is not checked here)", p.name, ct.Name)
	}
	if q := ct.Resources.Limits["memory"]; q != "" {
		n, err := parseMemory(q)
		if err != nil {
			return "", fmt.Errorf("container %s memory limit %q: %w", ct.Name, q, err)
		}
		args = append(args, "--memory", strconv.FormatInt(n, 10), "--memory-swap", strconv.FormatInt(n, 10))
	}
	if q := ct.Resources.Limits["cpu"]; q != "" {
		n, err := parseCPU(q)
		if err != nil {
			return "", fmt.Errorf("container %s cpu limit %q: %w", ct.Name, q, err)
		}
		args = append(args, "--cpus", strconv.FormatFloat(n, 'f', 3, 64))
	}
	for _, vm := range ct.VolumeMounts {
		src, ok := p.volumes[vm.Name]
		if !ok {
			return "", fmt.Errorf("pod %s: container %s mounts unknown volume %s", p.name, ct.Name, vm.Name)
		}
		ro := ""
		if vm.ReadOnly {
			ro = ",readonly"
		}
		if ad := p.projected[vm.Name]; ad != nil {
			if vm.SubPath != "" { // a subPath of a ConfigMap is a copy that never updates
				args = append(args, "--mount", "type=bind,src="+filepath.Join(ad.dir, "..data", vm.SubPath)+",dst="+vm.MountPath+",readonly")
				continue
			}
			args = append(args, "--mount", "type=bind,src="+src+",dst="+vm.MountPath+",readonly")
			continue
		}
		if vm.SubPath != "" {
			return "", fmt.Errorf("pod %s: container %s: subPath of volume %s not supported", p.name, ct.Name, vm.Name)
		}
		args = append(args, "--mount", "type=volume,src="+src+",dst="+vm.MountPath+ro)
	}
	if ct.WorkingDir != "" {
		args = append(args, "--workdir", ct.WorkingDir)
	}
	img := ct.Image
	if img == "" {
		img = c.image
	}
	cmdArgs := make([]string, 0, len(ct.Command)+len(ct.Args))
	for _, a := range ct.Command {
		cmdArgs = append(cmdArgs, expand(a, vars))
	}
	rest := make([]string, 0, len(ct.Args))
	for _, a := range ct.Args {
		rest = append(rest, expand(a, vars))
	}
	if len(cmdArgs) > 0 {
		args = append(args, "--entrypoint", cmdArgs[0], img)
		args = append(args, cmdArgs[1:]...)
	} else {
		args = append(args, img)
	}
	args = append(args, rest...)
	if _, err := docker(ctx, args...); err != nil {
		return "", fmt.Errorf("pod %s: container %s: %w", p.name, ct.Name, err)
	}
	p.mu.Lock()
	p.containers[ct.Name] = name
	p.mu.Unlock()
	return name, nil
}

// portOf resolves a probe's port (a number or a container port's name).
func portOf(ct *container, port intOrString) (int, error) {
	if n, err := strconv.Atoi(string(port)); err == nil {
		return n, nil
	}
	for _, cp := range ct.Ports {
		if cp.Name == string(port) {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("container %s has no port %q", ct.Name, port)
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

// probeOnce runs a probe once: an HTTP GET from the test process to the
// pod's address (the host reaches it on the bridge), or an exec.
func (p *pod) probeOnce(ctx context.Context, ct *container, pr *probe) error {
	p.mu.Lock()
	ip := p.ip
	name := p.containers[ct.Name]
	p.mu.Unlock()
	switch {
	case pr.HTTPGet != nil:
		port, err := portOf(ct, pr.HTTPGet.Port)
		if err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s:%d%s", ip, port, pr.HTTPGet.Path), nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			var b [300]byte
			n, _ := resp.Body.Read(b[:])
			return fmt.Errorf("GET %s: %s: %s", pr.HTTPGet.Path, resp.Status, strings.TrimSpace(string(b[:n])))
		}
		return nil
	case pr.Exec != nil:
		_, err := docker(ctx, append([]string{"exec", name}, pr.Exec.Command...)...)
		return err
	case pr.TCPSocket != nil:
		return nil
	}
	return nil
}

// waitProbe polls a probe until it succeeds or ctx ends; the deadline is
// the test's, not the probe's failure threshold (a slow machine is not a
// failed pod).
func (p *pod) waitProbe(ctx context.Context, ct *container, pr *probe) error {
	var last error
	for {
		if last = p.probeOnce(ctx, ct, pr); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readiness is every readinessProbe of the pod's running containers.
func (p *pod) ready(ctx context.Context) error {
	spec := p.c.spec
	for _, list := range [][]container{spec.InitContainers, spec.Containers} {
		for i := range list {
			ct := &list[i]
			if ct.ReadinessProbe == nil {
				continue
			}
			if err := p.probeOnce(ctx, ct, ct.ReadinessProbe); err != nil {
				return fmt.Errorf("%s: %s: %w", p.name, ct.Name, err)
			}
		}
	}
	return nil
}

// waitReady waits until the pod is ready.
func (p *pod) waitReady() {
	p.c.t.Helper()
	if err := p.waitReadyErr(readyTimeout); err != nil {
		p.c.t.Fatal(err)
	}
}

func (p *pod) waitReadyErr(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var last error
	for {
		if last = p.ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s not ready after %v: %v", p.name, d, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sidecarName is the Docker name of the bagkeeper sidecar container: the
// container running `bagkeeper run`.
func (c *cluster) sidecarSpec() *container {
	for _, list := range [][]container{c.spec.InitContainers, c.spec.Containers} {
		for i := range list {
			ct := &list[i]
			all := append(append([]string{}, ct.Command...), ct.Args...)
			for j, a := range all {
				if a == "run" && (j == 0 || strings.HasSuffix(all[j-1], "bagkeeper")) {
					return ct
				}
			}
		}
	}
	c.t.Fatal("no container runs `bagkeeper run`")
	return nil
}

func (p *pod) sidecar() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.containers[p.c.sidecarSpec().Name]
}

// bk runs an admin command in the pod's sidecar container.
func (p *pod) bk(ctx context.Context, args ...string) (string, error) {
	sc := p.c.sidecarSpec()
	bin := "bagkeeper"
	if len(sc.Command) > 0 {
		bin = sc.Command[0]
	}
	// The admin commands find the socket through the data dir: the
	// sidecar's own --data-dir, when its args give one.
	var extra []string
	all := append(append([]string{}, sc.Command...), sc.Args...)
	for i, a := range all {
		switch {
		case strings.HasPrefix(a, "--data-dir="):
			extra = []string{"-e", "BAGKEEPER_DATA_DIR=" + strings.TrimPrefix(a, "--data-dir=")}
		case a == "--data-dir" && i+1 < len(all):
			extra = []string{"-e", "BAGKEEPER_DATA_DIR=" + all[i+1]}
		case strings.HasPrefix(a, "--admin-socket="):
			extra = []string{"-e", "BAGKEEPER_ADMIN_SOCKET=" + strings.TrimPrefix(a, "--admin-socket=")}
		case a == "--admin-socket" && i+1 < len(all):
			extra = []string{"-e", "BAGKEEPER_ADMIN_SOCKET=" + all[i+1]}
		}
	}
	full := append(append([]string{"exec"}, extra...), p.sidecar(), bin)
	return docker(ctx, append(full, args...)...)
}

// stop stops the pod as the kubelet does: each main container's preStop
// then SIGTERM with the grace period, then the sidecars in reverse order;
// then the pod's containers, network namespace and emptyDirs go.
func (p *pod) stop() {
	c := p.c
	c.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return
	}
	grace := int64(30)
	if c.spec.TerminationGracePeriodSeconds != nil {
		grace = *c.spec.TerminationGracePeriodSeconds
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(grace+60)*time.Second)
	defer cancel()
	deadline := time.Now().Add(time.Duration(grace) * time.Second)
	stopOne := func(ct *container) {
		name, ok := p.containers[ct.Name]
		if !ok {
			return
		}
		defer func(start time.Time) {
			c.t.Logf("pod %s: %s stopped in %v", p.name, ct.Name, time.Since(start).Round(time.Millisecond))
		}(time.Now())
		if ct.Lifecycle != nil && ct.Lifecycle.PreStop != nil {
			pctx, pcancel := context.WithDeadline(ctx, deadline)
			switch ps := ct.Lifecycle.PreStop; {
			case ps.Exec != nil:
				if _, err := docker(pctx, append([]string{"exec", name}, ps.Exec.Command...)...); err != nil {
					c.t.Logf("pod %s: %s preStop: %v", p.name, ct.Name, err)
				}
			case ps.Sleep != nil:
				select {
				case <-pctx.Done():
				case <-time.After(time.Duration(ps.Sleep.Seconds) * time.Second):
				}
			}
			pcancel()
		}
		left := int(time.Until(deadline).Seconds())
		if left < 2 {
			left = 2 // the kubelet gives at least 2 s
		}
		if _, err := docker(ctx, "stop", "-t", strconv.Itoa(left), name); err != nil {
			c.t.Logf("pod %s: stop %s: %v", p.name, ct.Name, err)
		}
	}
	var wg sync.WaitGroup
	for i := range c.spec.Containers {
		wg.Add(1)
		go func() { defer wg.Done(); stopOne(&c.spec.Containers[i]) }()
	}
	wg.Wait()
	for i := len(c.spec.InitContainers) - 1; i >= 0; i-- {
		if ct := &c.spec.InitContainers[i]; c.spec.isSidecar(ct) {
			stopOne(ct)
		}
	}
	p.keepLogsLocked(ctx)
	p.removeLocked(ctx)
}

// removeLocked removes the incarnation's containers, pause container and
// emptyDir volumes (the claims' volumes stay).
func (p *pod) removeLocked(ctx context.Context) {
	out, _ := docker(ctx, "ps", "-aq", "--filter", "label=bagkeeper-pods-pod="+p.name, "--filter", "label=bagkeeper-pods-test="+p.c.id)
	ids := append(strings.Fields(out), p.pause)
	if _, err := docker(ctx, append([]string{"rm", "-f"}, ids...)...); err != nil {
		p.c.t.Logf("pod %s: %v", p.name, err)
	}
	for name, dv := range p.volumes {
		if p.projected[name] != nil || strings.Contains(dv, "-pvc-") {
			continue
		}
		if _, err := docker(ctx, "volume", "rm", dv); err != nil {
			p.c.t.Logf("pod %s: %v", p.name, err)
		}
	}
	p.running = false
}

// keepLogsLocked keeps the tail of every container of the stopped
// incarnation, printed if the test fails (its containers are removed).
func (p *pod) keepLogsLocked(ctx context.Context) {
	out, _ := docker(ctx, "ps", "-a", "--format", "{{.Names}}", "--filter", "label=bagkeeper-pods-pod="+p.name, "--filter", "label=bagkeeper-pods-test="+p.c.id)
	for _, name := range strings.Fields(out) {
		b, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", "60", name).CombinedOutput()
		p.c.mu.Lock()
		p.c.stoppedLogs = append(p.c.stoppedLogs, fmt.Sprintf("=== %s, stopped (last 60 lines)\n%s", name, b))
		p.c.mu.Unlock()
	}
}

// dumpLogs prints the tail of every container of the pod's incarnation.
func (p *pod) dumpLogs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := docker(ctx, "ps", "-a", "--format", "{{.Names}}", "--filter", "label=bagkeeper-pods-pod="+p.name, "--filter", "label=bagkeeper-pods-test="+p.c.id)
	for _, name := range strings.Fields(out) {
		cmd := exec.CommandContext(ctx, "docker", "logs", "--tail", "40", name)
		b, _ := cmd.CombinedOutput()
		p.c.t.Logf("=== %s (last 40 lines)\n%s", name, b)
	}
}

// jsonOut runs an admin command with --format json and decodes its output.
func (p *pod) jsonOut(ctx context.Context, v any, args ...string) error {
	out, err := p.bk(ctx, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("%s: %w: %.300s", strings.Join(args, " "), err, out)
	}
	return nil
}
