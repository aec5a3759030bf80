package maintenance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Several requesters share one maintenance: the maintenance annotation, one
// annotation per owner (OwnerAnnotationPrefix), every NodeMaintenance object
// that names the node, and the reboot controller. The node is in
// maintenance while any of them asks; one drain serves them all, and the
// agent undoes it only when the last one is gone. Who holds the maintenance
// now is written beside the drain record (RequestersAnnotation), so that
// `node-agent maintenance status` shows it; the record itself
// (pkg/selfdrain's Status) keeps the one trigger the drain was started for.

const (
	// OwnerAnnotationPrefix starts the per-owner request annotations:
	// maintenance.node-agent.io/<owner>: <reason>. Each team or controller
	// that may patch Nodes holds its own request under its own name, and
	// removing it ends only that request.
	OwnerAnnotationPrefix = "maintenance.node-agent.io/"
	// RequestersAnnotation is the agent's list of the requesters that hold
	// the node's maintenance now (JSON, a list of Requester), written
	// beside the drain record (selfdrain.StatusAnnotation) and removed when
	// the maintenance ends. It is shown, and tells a requester that stays
	// from a new one; it starts and ends nothing.
	RequestersAnnotation = "node-agent.io/maintenance-requesters"
	// MaxOwners bounds the owner annotations served: those past it, in the
	// order of their names, are listed only once an earlier one is gone,
	// so they still keep the maintenance from ending (fail closed).
	MaxOwners = 16
	// MaxRequestersShown bounds the list written to the Node, and
	// maxRequesterReason each reason in it: the annotations of a Node
	// share 256 KiB.
	MaxRequestersShown = 32
	maxRequesterReason = 256
)

// RequesterKind is what sort of source a requester is.
type RequesterKind string

// The kinds of requester.
const (
	// KindAnnotation is node-agent.io/maintenance; its name is "annotation".
	KindAnnotation RequesterKind = "annotation"
	// KindOwner is an owner annotation; its name is the owner's.
	KindOwner RequesterKind = "owner"
	// KindNodeMaintenance is a NodeMaintenance object; its name is its ID.
	KindNodeMaintenance RequesterKind = "nodemaintenance"
	// KindReboot is the reboot controller; its name is "reboot".
	KindReboot RequesterKind = "reboot"
)

// Requester is one source that holds the node's maintenance.
type Requester struct {
	Kind   RequesterKind `json:"kind"`
	Name   string        `json:"name"`
	Reason string        `json:"reason,omitempty"`
	// Since is when the agent first saw the request (a NodeMaintenance
	// object's creation).
	Since *metav1.Time `json:"since,omitempty"`
}

// String names the requester in Events and the CLI.
func (r Requester) String() string {
	switch r.Kind {
	case KindAnnotation, KindReboot:
		return string(r.Kind)
	}
	return string(r.Kind) + " " + r.Name
}

func (r Requester) key() string { return string(r.Kind) + "/" + r.Name }

// same reports whether r and o are the same request: the same source, and
// for the annotations the same reason (a new reason is a new request). The
// reboot controller's reason is its latest message, and an object's spec
// is its own: for them the source alone counts.
func (r Requester) same(o Requester) bool {
	if r.key() != o.key() {
		return false
	}
	if r.Kind == KindAnnotation || r.Kind == KindOwner {
		return shownReason(r.Reason) == shownReason(o.Reason)
	}
	return true
}

func shownReason(s string) string { return reasontext.ForNode(s, maxRequesterReason) }

// OwnerKey returns the annotation key of owner's request, or an error that
// says which owner names are valid.
func OwnerKey(owner string) (string, error) {
	key := OwnerAnnotationPrefix + owner
	if owner == "" {
		return "", fmt.Errorf("owner name must not be empty")
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return "", fmt.Errorf("owner %q does not make a valid annotation key %s: %s", owner, key, strings.Join(errs, "; "))
	}
	return key, nil
}

// ownerRequest is one owner annotation as read: its reason, or its refusal.
type ownerRequest struct {
	owner, key, raw string
	reason          string
	refusal         error
}

// parseOwners reads the owner annotations of node, in the order of their
// names. A key whose owner part is not a valid name is refused too.
func parseOwners(node *corev1.Node) []ownerRequest {
	var out []ownerRequest
	for k, v := range node.Annotations {
		owner, ok := strings.CutPrefix(k, OwnerAnnotationPrefix)
		if !ok {
			continue
		}
		o := ownerRequest{owner: owner, key: k, raw: v}
		o.reason, o.refusal = reasontext.ParseRequest(k, v)
		if o.refusal == nil && o.reason == "" {
			continue // blank asks for nothing, as the maintenance annotation
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b ownerRequest) int { return strings.Compare(a.owner, b.owner) })
	return out
}

// HasOwnerRequest reports whether an owner annotation on node asks for
// maintenance with a value the agent accepts.
func HasOwnerRequest(node *corev1.Node) bool {
	for _, o := range parseOwners(node) {
		if o.refusal == nil {
			return true
		}
	}
	return false
}

// ParseRequesters reads RequestersAnnotation on node: nil when there is
// none, an error when it does not parse.
func ParseRequesters(node *corev1.Node) ([]Requester, error) {
	raw, ok := node.Annotations[RequestersAnnotation]
	if !ok || raw == "" {
		return nil, nil
	}
	var out []Requester
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("annotation %s does not parse: %w", RequestersAnnotation, err)
	}
	return out, nil
}

// Requesters lists the requesters r holds: the annotation, the owners (at
// most MaxOwners), the NodeMaintenance objects and the reboot controller,
// in that order. Since is taken from recorded for a requester that was
// there, else from now (an object's creation for an object).
func (r Requests) Requesters(recorded []Requester, now metav1.Time) []Requester {
	var out []Requester
	add := func(q Requester) {
		q.Reason = shownReason(q.Reason)
		for _, old := range recorded {
			if old.same(q) && old.Since != nil {
				q.Since = old.Since
			}
		}
		if q.Since == nil {
			t := now
			q.Since = &t
		}
		out = append(out, q)
	}
	if r.Annotation != "" {
		add(Requester{Kind: KindAnnotation, Name: string(KindAnnotation), Reason: r.Annotation})
	}
	for _, o := range r.Owners {
		add(o)
	}
	for _, o := range r.liveObjects() {
		add(Requester{Kind: KindNodeMaintenance, Name: o.ID(), Reason: o.requestReason(), Since: &o.CreationTimestamp})
	}
	if r.Reboot != "" {
		add(Requester{Kind: KindReboot, Name: string(KindReboot), Reason: r.Reboot})
	}
	if len(out) > MaxRequestersShown {
		out = out[:MaxRequestersShown]
	}
	return out
}

// liveObjects are the objects of r not being deleted, the primary first.
func (r Requests) liveObjects() []*NodeMaintenance {
	if len(r.Objects) == 0 && r.Object != nil {
		return []*NodeMaintenance{r.Object}
	}
	var out []*NodeMaintenance
	for _, o := range r.Objects {
		if !o.deleting() {
			out = append(out, o)
		}
	}
	return out
}

// answeredByList reports whether one of the requesters of r was among
// recorded, the requesters that held the maintenance recorded: it still
// holds that maintenance, whoever came or went since.
func (r Requests) answeredByList(recorded []Requester) bool {
	for _, q := range r.Requesters(nil, metav1.Time{}) {
		for _, old := range recorded {
			if q.same(old) {
				return true
			}
		}
	}
	return false
}

// sameRequesters reports whether a and b list the same requests, whatever
// their Since.
func sameRequesters(a, b []Requester) bool {
	return slices.EqualFunc(a, b, func(x, y Requester) bool { return x.same(y) && x.Reason == y.Reason })
}

// gone returns the requesters of before that after no longer lists.
func gone(before, after []Requester) []Requester {
	var out []Requester
	for _, b := range before {
		if !slices.ContainsFunc(after, func(a Requester) bool { return a.key() == b.key() }) {
			out = append(out, b)
		}
	}
	return out
}

// names joins the requesters' names for an Event.
func names(rs []Requester) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// ownerRequesters turns the owner annotations into requesters: at most
// MaxOwners, in the order of their names. A refused value asks for nothing,
// but an owner recorded among the holders before keeps its recorded
// request: "false" is not how a request ends, its removal is (as for the
// maintenance annotation, Controller.refuse).
func ownerRequesters(owners []ownerRequest, recorded []Requester) []Requester {
	var out []Requester
	for _, o := range owners {
		if len(out) == MaxOwners {
			break
		}
		q := Requester{Kind: KindOwner, Name: o.owner, Reason: o.reason}
		if o.refusal != nil {
			i := slices.IndexFunc(recorded, func(r Requester) bool { return r.key() == q.key() })
			if i < 0 {
				continue
			}
			q.Reason = recorded[i].Reason
		}
		out = append(out, q)
	}
	return out
}
