// Package kube decodes rendered manifests strictly into their typed
// Kubernetes objects and validates them the way the API server does on
// create.
//
// The validation is Kubernetes' own code (k8s.io/kubernetes), wired as the
// API server's registry strategies wire it:
//
//   - the v1 objects are defaulted with the scheme's defaulting functions
//     (legacyscheme.Scheme.Default, i.e. the generated SetObjectDefaults_*
//     of pkg/apis/apps/v1, pkg/apis/core/v1 and pkg/apis/policy/v1, which
//     the pkg/apis/*/install packages register), then converted to the
//     internal types (legacyscheme.Scheme.Convert);
//   - then each goes to the validation the strategy's Validate calls:
//     apps validation.ValidateStatefulSet (with StatefulSetValidationOptions
//     as pkg/registry/apps/statefulset sets them) and ValidateDeployment,
//     core validation.ValidateServiceCreate, ValidateConfigMap,
//     ValidateSecret, ValidateServiceAccount, ValidatePodCreate (ResourceIsPod
//     set), policy validation.ValidatePodDisruptionBudget, each with the
//     PodValidationOptions from pkg/api/pod (GetValidationOptionsFromPodTemplate,
//     GetValidationOptionsFromPodSpecAndMeta) for a new object.
//
// The feature gates are those this k8s.io/kubernetes release has by default:
// a validation of a given older release is not available from one code base,
// so the checks that differ by version (a native sidecar needs 1.29+) are the
// chart tests' own.
package kube

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install" // apps/v1 defaults and conversions
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install" // core/v1 defaults and conversions
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/policy"
	_ "k8s.io/kubernetes/pkg/apis/policy/install" // policy/v1 defaults and conversions
	policyvalidation "k8s.io/kubernetes/pkg/apis/policy/validation"
)

// Certificate is the part of cert-manager's cert-manager.io/v1 Certificate
// that a chart may set; any other field is an error when decoding strictly.
type Certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       CertificateSpec   `json:"spec"`
}

// CertificateSpec is cert-manager's Certificate spec (the fields of v1).
type CertificateSpec struct {
	SecretName            string           `json:"secretName"`
	SecretTemplate        *SecretTemplate  `json:"secretTemplate,omitempty"`
	IssuerRef             ObjectReference  `json:"issuerRef"`
	CommonName            string           `json:"commonName,omitempty"`
	DNSNames              []string         `json:"dnsNames,omitempty"`
	IPAddresses           []string         `json:"ipAddresses,omitempty"`
	URIs                  []string         `json:"uris,omitempty"`
	EmailAddresses        []string         `json:"emailAddresses,omitempty"`
	Duration              string           `json:"duration,omitempty"`
	RenewBefore           string           `json:"renewBefore,omitempty"`
	IsCA                  bool             `json:"isCA,omitempty"`
	Usages                []string         `json:"usages,omitempty"`
	PrivateKey            *PrivateKey      `json:"privateKey,omitempty"`
	Subject               map[string]any   `json:"subject,omitempty"`
	RevisionHistoryLimit  *int32           `json:"revisionHistoryLimit,omitempty"`
	AdditionalOutputFmts  []map[string]any `json:"additionalOutputFormats,omitempty"`
	Keystores             map[string]any   `json:"keystores,omitempty"`
	NameConstraints       map[string]any   `json:"nameConstraints,omitempty"`
	LiteralSubject        string           `json:"literalSubject,omitempty"`
	OtherNames            []map[string]any `json:"otherNames,omitempty"`
	EncodeUsagesInRequest *bool            `json:"encodeUsagesInRequest,omitempty"`
	SignatureAlgorithm    string           `json:"signatureAlgorithm,omitempty"`
}

// SecretTemplate is cert-manager's labels and annotations for the Secret.
type SecretTemplate struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ObjectReference is cert-manager's issuerRef.
type ObjectReference struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// PrivateKey is cert-manager's privateKey.
type PrivateKey struct {
	RotationPolicy string `json:"rotationPolicy,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
}

// Validate checks the parts of a Certificate that cert-manager's webhook
// would refuse outright.
func (c *Certificate) Validate() error {
	var errs []string
	if c.Metadata.Name == "" {
		errs = append(errs, "metadata.name is empty")
	}
	if c.Spec.SecretName == "" {
		errs = append(errs, "spec.secretName is empty")
	}
	if c.Spec.IssuerRef.Name == "" {
		errs = append(errs, "spec.issuerRef.name is empty")
	}
	if c.Spec.CommonName == "" && len(c.Spec.DNSNames) == 0 && len(c.Spec.IPAddresses) == 0 && len(c.Spec.URIs) == 0 && len(c.Spec.EmailAddresses) == 0 && c.Spec.LiteralSubject == "" {
		errs = append(errs, "no commonName, dnsNames, ipAddresses, uris or emailAddresses")
	}
	switch c.Spec.IssuerRef.Kind {
	case "", "Issuer", "ClusterIssuer":
	default:
		if c.Spec.IssuerRef.Group == "" || c.Spec.IssuerRef.Group == "cert-manager.io" {
			errs = append(errs, fmt.Sprintf("spec.issuerRef.kind %q is not Issuer or ClusterIssuer", c.Spec.IssuerRef.Kind))
		}
	}
	// cert-manager's webhook: a duration of at least an hour, renewed
	// before it ends.
	var d, rb time.Duration
	var err error
	if c.Spec.Duration != "" {
		if d, err = time.ParseDuration(c.Spec.Duration); err != nil {
			errs = append(errs, "spec.duration: "+err.Error())
		} else if d < time.Hour {
			errs = append(errs, fmt.Sprintf("spec.duration %s is under an hour", d))
		}
	}
	if c.Spec.RenewBefore != "" {
		if rb, err = time.ParseDuration(c.Spec.RenewBefore); err != nil {
			errs = append(errs, "spec.renewBefore: "+err.Error())
		} else if d != 0 && rb >= d {
			errs = append(errs, fmt.Sprintf("spec.renewBefore %s is not shorter than spec.duration %s", rb, d))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("Certificate %s: %s", c.Metadata.Name, strings.Join(errs, "; "))
	}
	return nil
}

// New returns an empty typed object for apiVersion and kind, or an error for
// a kind the chart tests do not know.
func New(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Pod":
		return &corev1.Pod{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}, nil
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, nil
	case "cert-manager.io/v1/Certificate":
		return &Certificate{}, nil
	}
	return nil, fmt.Errorf("unknown apiVersion %s kind %s", apiVersion, kind)
}

// DecodeStrict decodes one YAML document into its typed object; a field the
// type does not have, or a field given twice, is an error.
func DecodeStrict(apiVersion, kind, content string) (any, error) {
	obj, err := New(apiVersion, kind)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict([]byte(content), obj); err != nil {
		return nil, fmt.Errorf("%s %s: strict decoding: %w", apiVersion, kind, err)
	}
	return obj, nil
}

// Validate validates a decoded object as the API server would on create in
// namespace (the namespace the request is made in fills an empty
// metadata.namespace, as it does for helm install). It returns the errors
// the API server would answer with; a kind without a validation here is an
// error too.
func Validate(obj any, namespace string) (field.ErrorList, error) {
	switch o := obj.(type) {
	case *Certificate:
		if err := o.Validate(); err != nil {
			return field.ErrorList{field.Invalid(field.NewPath("spec"), o.Metadata.Name, err.Error())}, nil
		}
		return nil, nil
	case *rbacv1.Role, *rbacv1.RoleBinding, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
		return nil, fmt.Errorf("no validation wired for %T", obj)
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a runtime.Object", obj)
	}
	ro = ro.DeepCopyObject()
	if m, ok := ro.(metav1.Object); ok && m.GetNamespace() == "" {
		m.SetNamespace(namespace)
	}
	legacyscheme.Scheme.Default(ro)
	switch v := ro.(type) {
	case *appsv1.StatefulSet:
		var in apps.StatefulSet
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		// As pkg/registry/apps/statefulset's strategy.Validate.
		opts := podutil.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil)
		setOpts := appsvalidation.StatefulSetValidationOptions{AllowInvalidServiceName: false}
		return appsvalidation.ValidateStatefulSet(&in, setOpts, opts), nil
	case *appsv1.Deployment:
		var in apps.Deployment
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		opts := podutil.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil)
		return appsvalidation.ValidateDeployment(&in, opts), nil
	case *corev1.Service:
		var in core.Service
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		allocateClusterIP(&in)
		return corevalidation.ValidateServiceCreate(&in), nil
	case *corev1.ConfigMap:
		var in core.ConfigMap
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		return corevalidation.ValidateConfigMap(&in), nil
	case *corev1.Secret:
		var in core.Secret
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		return corevalidation.ValidateSecret(&in), nil
	case *corev1.ServiceAccount:
		var in core.ServiceAccount
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		return corevalidation.ValidateServiceAccount(&in), nil
	case *corev1.Pod:
		var in core.Pod
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		// As pkg/registry/core/pod's strategy.Validate.
		opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&in.Spec, nil, &in.ObjectMeta, nil)
		opts.ResourceIsPod = true
		return corevalidation.ValidatePodCreate(&in, opts), nil
	case *policyv1.PodDisruptionBudget:
		var in policy.PodDisruptionBudget
		if err := legacyscheme.Scheme.Convert(v, &in, nil); err != nil {
			return nil, err
		}
		opts := policyvalidation.PodDisruptionBudgetValidationOptions{AllowInvalidLabelValueInSelector: false}
		return policyvalidation.ValidatePodDisruptionBudget(&in, opts), nil
	}
	return nil, fmt.Errorf("no validation wired for %T", obj)
}

// allocateClusterIP does what the service registry's allocation does before
// the strategy validates a new Service (pkg/registry/core/service/storage's
// BeginCreate): a single-stack IPv4 family and, unless the service is
// headless, a cluster IP from the service range.
func allocateClusterIP(s *core.Service) {
	if s.Spec.Type == core.ServiceTypeExternalName {
		return
	}
	if s.Spec.IPFamilyPolicy == nil {
		p := core.IPFamilyPolicySingleStack
		s.Spec.IPFamilyPolicy = &p
	}
	if len(s.Spec.IPFamilies) == 0 {
		s.Spec.IPFamilies = []core.IPFamily{core.IPv4Protocol}
	}
	if s.Spec.ClusterIP == "" {
		s.Spec.ClusterIP = "10.96.0.42"
	}
	if len(s.Spec.ClusterIPs) == 0 {
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	}
}
