package kube

import (
	"strings"
	"testing"
)

// The validation must catch what the API server refuses: these are its own
// error messages.
func TestValidateRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ apiVersion, kind, doc, want string }{
		"pod without containers": {"v1", "Pod", "metadata: {name: p}\nspec: {containers: []}", "spec.containers"},
		"bad name":               {"v1", "ConfigMap", "metadata: {name: Not_OK}", "metadata.name"},
		"bad port name":          {"v1", "Service", "metadata: {name: s}\nspec: {ports: [{name: TOO_LONG_AND_UPPER_CASE, port: 80}]}", "spec.ports[0].name"},
		"sts selector mismatch": {"apps/v1", "StatefulSet", `metadata: {name: s}
spec:
  serviceName: s
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: c}}
    spec: {containers: [{name: c, image: i}]}`, "spec.template.metadata.labels"},
		"certificate renews after it ends": {"cert-manager.io/v1", "Certificate", "metadata: {name: c}\nspec: {secretName: s, commonName: x, issuerRef: {name: ca}, duration: 24h, renewBefore: 48h}", "renewBefore"},
		"certificate without issuer":       {"cert-manager.io/v1", "Certificate", "metadata: {name: c}\nspec: {secretName: s, commonName: x, issuerRef: {name: \"\"}}", "issuerRef"},
		"pdb both":                         {"policy/v1", "PodDisruptionBudget", "metadata: {name: p}\nspec: {minAvailable: 1, maxUnavailable: 1}", "spec"},
	} {
		t.Run(name, func(t *testing.T) {
			obj, err := DecodeStrict(tc.apiVersion, tc.kind, "apiVersion: "+tc.apiVersion+"\nkind: "+tc.kind+"\n"+tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			errs, err := Validate(obj, "default")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("want an error on %s, got %v", tc.want, errs)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	obj, err := DecodeStrict("apps/v1", "Deployment", `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec: {containers: [{name: c, image: i}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if errs, err := Validate(obj, "default"); err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	obj, err = DecodeStrict("v1", "Service", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {a: b}, ports: [{name: http, port: 80}]}")
	if err != nil {
		t.Fatal(err)
	}
	if errs, err := Validate(obj, "default"); err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
}

func TestDecodeStrictRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ apiVersion, kind, doc string }{
		"unknown field":       {"v1", "ConfigMap", "metadata: {name: c}\ndatta: {}"},
		"duplicate field":     {"v1", "ConfigMap", "metadata: {name: c}\ndata: {}\ndata: {}"},
		"nested unknown":      {"apps/v1", "StatefulSet", "metadata: {name: s}\nspec: {podManagmentPolicy: Parallel}"},
		"certificate unknown": {"cert-manager.io/v1", "Certificate", "metadata: {name: c}\nspec: {secretName: s, issuer: x}"},
		"unknown kind":        {"example.com/v1", "Widget", "metadata: {name: w}"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeStrict(tc.apiVersion, tc.kind, "apiVersion: "+tc.apiVersion+"\nkind: "+tc.kind+"\n"+tc.doc); err == nil {
				t.Fatal("decoded")
			}
		})
	}
}
