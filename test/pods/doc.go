// Package pods runs the application's pods as Docker containers started from
// the pod template the Helm chart renders, and checks what the sidecars
// promise (no lost bags, no unit created or removed, one raft leader, no
// install hook again) across the faults a Kubernetes cluster deals pods:
// rolling updates, a killed sidecar, a paused pod, a partition, recreated
// pods with and without their volumes, and certificate rotation.
//
// The tests need a Docker daemon and the image `make image` builds; they
// skip without them, except under CI=true where a missing image fails. Run
// them with `make pods-test`.
package pods
