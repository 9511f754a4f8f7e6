// Package pods runs the application's pods as Docker containers started from
// the pod template the demo Helm chart renders (charts/test's renderer, for
// Kubernetes 1.31: the sidecar is a native sidecar), and checks what the
// sidecars promise (no lost bags, no unit created or removed, one raft
// leader, every pod ready, no install again) across the faults a Kubernetes
// cluster deals pods: rolling updates, a killed sidecar, a paused pod, a
// partition, recreated pods with and without their volumes, a Deployment's
// rollout, and certificate rotation.
//
// The harness does what the kubelet would: a pause container per pod owns
// its network namespace (on a Docker network of the test's own, with the
// headless service's DNS names as aliases), emptyDirs are Docker volumes of
// one pod incarnation, a volume claim is a Docker volume of the pod name,
// ConfigMaps and Secrets are directories laid out like the kubelet's (a
// `..data` symlink swapped on update), the security context and limits
// become docker run flags, probes are polled from the test process, and a
// pod stops as the kubelet stops it.
//
// The tests need a Docker daemon and the image `make image` builds
// (BAGKEEPER_IMAGE, default bagkeeper:dev); they skip without them, except
// under CI=true where a missing image fails. Run them with `make pods-test`;
// `go test -run TestPodsBench ./test/pods/ -pods.bench` prints the numbers
// for BENCHMARKS.md.
package pods
