// Package evictionrequest owns node-agent's use of the EvictionRequest API
// (KEP-4563, lifecycle.k8s.io/v1alpha1, alpha in Kubernetes 1.37 behind the
// EvictionRequestAPI gate): the choice between it and the Eviction API
// (drain.evictionAPI), whether the apiserver serves it, and one pod's
// eviction through it, as node-agent's requester:
//
//   - the drain creates an EvictionRequest for the pod, owned by the pod (the
//     garbage collector removes it with the pod) and named after its UID;
//   - a pod that names an eviction responder of its own
//     (spec.evictionResponders, other than the built-in imperative one) is
//     left to that responder: a VM's live migration, for one. The drain
//     waits for the pod to go, retrying as it does after a 429;
//   - a pod that names none, or whose request a responder marked Failed, is
//     evicted through pods/eviction: Kubernetes v1.37.2 ships no controller
//     that acts on EvictionRequests, so node-agent does what the built-in
//     fallback responder (imperative-eviction.k8s.io/evictor) is meant to do,
//     PodDisruptionBudgets included;
//   - when the maintenance ends, or its drain gives up at drain.timeout, the
//     requests of the pods left are withdrawn (intent Withdrawn), so no
//     responder keeps moving a VM after the maintenance ended; an agent that
//     exits mid-drain leaves them, for the next agent resumes the drain. A
//     later drain sets its own withdrawn request back to intent Eviction;
//   - a request found under node-agent's name that another requester made,
//     or for another pod, is not node-agent's: it is left alone, and the pod
//     is evicted through pods/eviction.
//
// Every request goes as the node itself (the agent impersonates it, as for
// pods/eviction); deploy/components/eviction-requests grants nodes the
// right, and its admission policy confines a node to its own pods.
package evictionrequest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/evictionrequest/spec"
	"github.com/node-agent/node-agent/pkg/kube"
)

// GroupVersion is the API's group version; Resource its resource.
var GroupVersion = schema.GroupVersion{Group: "lifecycle.k8s.io", Version: "v1alpha1"}

// Resource is the EvictionRequest resource.
const Resource = "evictionrequests"

// Requester is node-agent's requester name (domain-prefixed; *.k8s.io is
// reserved to Kubernetes).
const Requester = "node-agent.io/drain"

// ImperativeResponder is the built-in fallback responder, which evicts
// through pods/eviction.
const ImperativeResponder = "imperative-eviction.k8s.io/evictor"

// NamePrefix starts the name of every EvictionRequest node-agent creates;
// the rest is the pod's UID.
const NamePrefix = "node-agent-"

// Served reports whether the apiserver serves EvictionRequests.
func Served(d kube.DiscoveryInterface) (bool, error) {
	return kube.Serves(d, GroupVersion.WithResource(Resource))
}

// ErrNotServed is Choose's error in Request mode on a cluster without the
// API.
var ErrNotServed = errors.New("the apiserver does not serve " + Resource + "." + GroupVersion.Group + "/" + GroupVersion.Version +
	" (Kubernetes 1.37 or later with --feature-gates=EvictionRequestAPI=true and --runtime-config=lifecycle.k8s.io/v1alpha1=true)")

// Choose decides, for one drain, whether it goes through EvictionRequests,
// and says why. In Request mode a cluster that does not serve them is an
// error: the drain is not started. In Auto mode it falls back to
// pods/eviction.
func Choose(mode spec.Mode, served bool, discoveryErr error) (use bool, why string, err error) {
	switch mode {
	case spec.Eviction, "":
		return false, "drain.evictionAPI is eviction", nil
	case spec.Request:
		if discoveryErr != nil {
			return false, "", discoveryErr
		}
		if !served {
			return false, "", fmt.Errorf("drain.evictionAPI is evictionRequest, but %w", ErrNotServed)
		}
		return true, "drain.evictionAPI is evictionRequest", nil
	case spec.Auto:
		if discoveryErr != nil {
			return false, fmt.Sprintf("drain.evictionAPI auto uses pods/eviction: %v", discoveryErr), nil
		}
		if !served {
			return false, "drain.evictionAPI auto uses pods/eviction: " + ErrNotServed.Error(), nil
		}
		return true, "drain.evictionAPI auto: the apiserver serves " + Resource, nil
	}
	return false, "", fmt.Errorf("drain.evictionAPI %q: unknown", mode)
}

// EvictionRequest is the part of lifecycle.k8s.io/v1alpha1's EvictionRequest
// node-agent reads and writes.
type EvictionRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is an EvictionRequest's spec.
type Spec struct {
	Target    Target `json:"target"`
	Requester string `json:"requester"`
	// Intent is "Eviction" or "Withdrawn".
	Intent string `json:"intent"`
}

// Target names the pod.
type Target struct {
	Pod *PodRef `json:"pod,omitempty"`
}

// PodRef is a pod in the request's namespace.
type PodRef struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// Status is what responders report.
type Status struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// The intents and condition types node-agent uses.
const (
	IntentEviction  = "Eviction"
	IntentWithdrawn = "Withdrawn"
	ConditionFailed = "Failed"
)

// Name is the name of node-agent's EvictionRequest for pod.
func Name(pod *corev1.Pod) string { return NamePrefix + string(pod.UID) }

// For returns node-agent's EvictionRequest for pod.
func For(pod *corev1.Pod) *EvictionRequest {
	no := false
	return &EvictionRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "EvictionRequest"},
		ObjectMeta: metav1.ObjectMeta{
			Name: Name(pod), Namespace: pod.Namespace,
			// The garbage collector deletes the request with its pod.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, BlockOwnerDeletion: &no}},
		},
		Spec: Spec{Target: Target{Pod: &PodRef{Name: pod.Name, UID: pod.UID}}, Requester: Requester, Intent: IntentEviction},
	}
}

// Failed returns the Failed condition's message when a responder marked the
// request failed.
func (er *EvictionRequest) Failed() (string, bool) {
	for _, c := range er.Status.Conditions {
		if c.Type == ConditionFailed && c.Status == metav1.ConditionTrue {
			return strings.TrimSpace(c.Reason + ": " + c.Message), true
		}
	}
	return "", false
}

// Responders reads the responders a pod names in spec.evictionResponders
// (Kubernetes 1.37) from its JSON, which node-agent's corev1 types predate.
func Responders(podJSON []byte) ([]string, error) {
	var p struct {
		Spec struct {
			EvictionResponders []struct {
				Name string `json:"name"`
			} `json:"evictionResponders"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(podJSON, &p); err != nil {
		return nil, fmt.Errorf("reading the pod's eviction responders: %w", err)
	}
	var out []string
	for _, r := range p.Spec.EvictionResponders {
		out = append(out, r.Name)
	}
	return out, nil
}

// OwnResponders are the responders other than the imperative fallback: those
// that act on a request themselves.
func OwnResponders(names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == ImperativeResponder })
}

// API is what a drain does with EvictionRequests and its pods' JSON.
type API interface {
	// Create creates er, or returns the one of that name already there.
	Create(ctx context.Context, er *EvictionRequest) (*EvictionRequest, error)
	// Get reads the request ns/name.
	Get(ctx context.Context, ns, name string) (*EvictionRequest, error)
	// Withdraw sets the intent of the request ns/name to Withdrawn.
	Withdraw(ctx context.Context, ns, name string) error
	// Resubmit sets the intent of the request ns/name back to Eviction.
	Resubmit(ctx context.Context, ns, name string) error
	// PodJSON reads a pod as the API serves it.
	PodJSON(ctx context.Context, ns, name string) ([]byte, error)
}

// NewAPI returns an API on cfg, which should impersonate the node
// (podaccess.NodeConfig).
func NewAPI(cfg *rest.Config) (API, error) {
	lc, err := kube.RawRESTClient(cfg, GroupVersion)
	if err != nil {
		return nil, err
	}
	core, err := kube.RawRESTClient(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return restAPI{lifecycle: lc, core: core}, nil
}

type restAPI struct{ lifecycle, core *rest.RESTClient }

func (a restAPI) Create(ctx context.Context, er *EvictionRequest) (*EvictionRequest, error) {
	body, err := json.Marshal(er)
	if err != nil {
		return nil, err
	}
	raw, err := a.lifecycle.Post().Namespace(er.Namespace).Resource(Resource).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Raw()
	if apierrors.IsAlreadyExists(err) {
		return a.Get(ctx, er.Namespace, er.Name)
	}
	if err != nil {
		return nil, err
	}
	return decode(raw, er.Namespace, er.Name)
}

func (a restAPI) Get(ctx context.Context, ns, name string) (*EvictionRequest, error) {
	raw, err := a.lifecycle.Get().Namespace(ns).Resource(Resource).Name(name).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	return decode(raw, ns, name)
}

func decode(raw []byte, ns, name string) (*EvictionRequest, error) {
	out := &EvictionRequest{}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("reading EvictionRequest %s/%s: %w", ns, name, err)
	}
	return out, nil
}

func (a restAPI) Withdraw(ctx context.Context, ns, name string) error {
	return a.setIntent(ctx, ns, name, IntentWithdrawn)
}

func (a restAPI) Resubmit(ctx context.Context, ns, name string) error {
	return a.setIntent(ctx, ns, name, IntentEviction)
}

func (a restAPI) setIntent(ctx context.Context, ns, name, intent string) error {
	patch := []byte(`{"spec":{"intent":"` + intent + `"}}`)
	return a.lifecycle.Patch(types.MergePatchType).Namespace(ns).Resource(Resource).Name(name).Body(patch).Do(ctx).Error()
}

func (a restAPI) PodJSON(ctx context.Context, ns, name string) ([]byte, error) {
	return a.core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Raw()
}

// notOurs says why er, found under node-agent's name for pod, is not
// node-agent's request for it; "" when it is.
func notOurs(er *EvictionRequest, pod *corev1.Pod) string {
	target := er.Spec.Target.Pod
	switch {
	case er.Spec.Requester != Requester:
		return fmt.Sprintf("EvictionRequest %s/%s was made by requester %q, not node-agent's %s; the pod is evicted through pods/eviction", pod.Namespace, er.Name, er.Spec.Requester, Requester)
	case target == nil || target.UID != pod.UID:
		return fmt.Sprintf("EvictionRequest %s/%s targets another pod; the pod is evicted through pods/eviction", pod.Namespace, er.Name)
	}
	return ""
}

// AwaitingResponder is the answer for a pod left to its own responders: the
// drain retries later, as after a 429.
type AwaitingResponder struct {
	Request    string // namespace/name of the EvictionRequest
	Responders []string
}

func (a *AwaitingResponder) Error() string {
	return fmt.Sprintf("waiting for its eviction responder %s to act on EvictionRequest %s", strings.Join(a.Responders, ", "), a.Request)
}

// ErrCreateRefused wraps the apiserver's refusal (403) to create node-agent's
// EvictionRequest.
var ErrCreateRefused = errors.New("the apiserver refused to create the EvictionRequest")

// Outcome is what Evict did.
type Outcome struct {
	// Requested: the pod's EvictionRequest exists.
	Requested bool
	// Failed, when not empty, is the Failed condition that sent the pod to
	// the fallback.
	Failed string
	// Foreign, when not empty, says why the request found under
	// node-agent's name is not node-agent's; the pod went to the fallback.
	Foreign string
}

// Memo is what Evict learned of one pod's request, kept by the caller
// between the drain's retries of that pod, so that a retry while a
// responder works costs one read of the request rather than a create, a
// read and a read of the pod. The zero Memo knows nothing.
type Memo struct {
	// inForce: node-agent's request exists, with intent Eviction.
	inForce bool
	// responders are the pod's spec.evictionResponders (immutable, as the
	// rest of a pod's spec), once read.
	responders      []string
	respondersKnown bool
}

// Evict asks for pod's eviction through an EvictionRequest: it creates the
// request (or finds it), then either leaves the pod to its own responders
// (an *AwaitingResponder error) or, where the pod names none or a responder
// marked the request Failed, calls fallback, which evicts through
// pods/eviction, and returns its result. memo (not nil) carries what an
// earlier call for the same pod learned.
func Evict(ctx context.Context, api API, pod *corev1.Pod, memo *Memo, fallback func(context.Context) error) (Outcome, error) {
	var er *EvictionRequest
	var err error
	if memo.inForce {
		er, err = api.Get(ctx, pod.Namespace, Name(pod))
		if apierrors.IsNotFound(err) {
			memo.inForce = false
		}
	}
	if !memo.inForce {
		er, err = api.Create(ctx, For(pod))
	}
	if apierrors.IsForbidden(err) {
		return Outcome{}, fmt.Errorf("%w %s/%s: %w", ErrCreateRefused, pod.Namespace, Name(pod), err)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("asking for EvictionRequest %s/%s: %w", pod.Namespace, Name(pod), err)
	}
	if why := notOurs(er, pod); why != "" {
		// Someone else created a request under node-agent's name for
		// this pod (a tenant may create EvictionRequests in its
		// namespace): it is not used, and not withdrawn later. The pod
		// is evicted through pods/eviction, PodDisruptionBudgets and
		// all, as with no responder.
		memo.inForce = false
		return Outcome{Foreign: why}, fallback(ctx)
	}
	out := Outcome{Requested: true}
	if er.Spec.Intent == IntentWithdrawn {
		// node-agent's own request, withdrawn when an earlier
		// maintenance ended while the pod stayed: asked for again.
		if err := api.Resubmit(ctx, pod.Namespace, er.Name); err != nil {
			return out, fmt.Errorf("asking again for EvictionRequest %s/%s, withdrawn by an earlier maintenance: %w", pod.Namespace, er.Name, err)
		}
		er.Spec.Intent = IntentEviction
	}
	memo.inForce = true
	if msg, ok := er.Failed(); ok {
		out.Failed = msg
		return out, fallback(ctx)
	}
	if !memo.respondersKnown {
		raw, err := api.PodJSON(ctx, pod.Namespace, pod.Name)
		if err != nil {
			return out, err
		}
		names, err := Responders(raw)
		if err != nil {
			return out, err
		}
		memo.responders, memo.respondersKnown = names, true
	}
	if own := OwnResponders(memo.responders); len(own) > 0 {
		return out, &AwaitingResponder{Request: pod.Namespace + "/" + er.Name, Responders: own}
	}
	return out, fallback(ctx)
}
