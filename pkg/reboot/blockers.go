package reboot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/podaccess"
)

// Every check below fails closed: when it cannot be made, it reports a
// blocker that says why, and the reboot waits. A node that reboots because
// Prometheus was down, or the apiserver did not answer, is the outage the
// check was configured to prevent (kured fails closed the same way).

// PodLister lists the pods on this node that match a selector.
type PodLister interface {
	ListPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error)
}

// NodePods lists a node's pods through the apiserver with a spec.nodeName
// field selector, through the client pkg/podaccess chose: as the node itself
// (ModeNode: the Node authorizer lets the node's identity list its pods only
// with that selector), or with the ServiceAccount's own grant where the
// cluster refuses the impersonation (ModeClusterWide), as the drain does.
type NodePods struct {
	// Access says how the node's pods are reached; it is asked before
	// every list, as the drain asks before it begins. The wiring hands it
	// podaccess.Reporter.Check, shared with the drain.
	Access func(ctx context.Context) (podaccess.Access, error)
	Node   string
}

// ListPods implements PodLister; the label selector is applied by the
// apiserver. With no way to the pods (ModeNone), or when the way cannot be
// found out, it fails, and PodBlockers reports that as a blocker.
func (n NodePods) ListPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error) {
	acc, err := n.Access(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding out how node %s's pods are reached: %w", n.Node, err)
	}
	if acc.Client == nil {
		return nil, fmt.Errorf("%w: %s; %s", podaccess.ErrNoAccess, acc.Why, podaccess.Fix)
	}
	list, err := acc.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Node).String(),
		LabelSelector: selector.String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// PodBlockers finds the pods that block a reboot: those on this node that
// match reboot.blockingPodSelector and have not finished.
type PodBlockers struct {
	Lister PodLister
	// Selector is the parsed reboot.blockingPodSelector; nil or empty
	// means no pod blocks (labels.Parse("") would select every pod).
	Selector labels.Selector
	// Namespaces is reboot.blockingPodNamespaces: only pods of these
	// namespaces block. Empty: every namespace's.
	Namespaces []string
}

// Blockers returns one Blocker per blocking pod, namespace/name, sorted; a
// failed list is itself a blocker.
func (p PodBlockers) Blockers(ctx context.Context) []Blocker {
	if p.Selector == nil || p.Selector.Empty() {
		return nil
	}
	pods, err := p.Lister.ListPods(ctx, p.Selector)
	if err != nil {
		return []Blocker{{Kind: BlockerPod, Name: "pods not listed: " + err.Error()}}
	}
	var out []Blocker
	for _, pod := range pods {
		// A pod that finished holds nothing a reboot could break; kured
		// leaves out the same phases.
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if !p.Selector.Matches(labels.Set(pod.Labels)) {
			continue // the lister may be a store that does not filter
		}
		if len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, pod.Namespace) {
			// The label alone is anyone's who may create a pod here;
			// the admin chose whose pods count.
			continue
		}
		out = append(out, Blocker{Kind: BlockerPod, Name: pod.Namespace + "/" + pod.Name})
	}
	slices.SortFunc(out, func(a, b Blocker) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// maxAnswerBody bounds the answer read from Prometheus (a gate's, the
// alert gate's included); a cluster in trouble can have many alerts, but
// not this many bytes of them.
const maxAnswerBody = 16 << 20

// cappedReader reads at most left bytes of r, and says when r had more.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			c.over = true
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// decodeAnswer reads a Prometheus API answer as a stream:
// {"status": ..., "error": ..., "data": ...}, keys in any order, other keys
// skipped; data reads the value of "data". An answer whose status is not
// success is an error that quotes Prometheus's.
func decodeAnswer(r io.Reader, data func(*json.Decoder) error) error {
	dec := json.NewDecoder(r)
	bad := func(err error) error { return fmt.Errorf("not a Prometheus API answer: %w", err) }
	var status, apiErr string
	if err := expectDelim(dec, '{'); err != nil {
		return bad(err)
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return bad(err)
		}
		switch key {
		case "status":
			err = dec.Decode(&status)
		case "error":
			err = dec.Decode(&apiErr)
		case "data":
			err = data(dec)
		default:
			err = dec.Decode(&json.RawMessage{})
		}
		if err != nil {
			return bad(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return bad(err)
	}
	if status != "success" {
		if apiErr != "" {
			return fmt.Errorf("status %q: %s", status, apiErr)
		}
		return fmt.Errorf("status %q, want \"success\"", status)
	}
	return nil
}

// openOrNull reads the opening delimiter want, or a null in its place
// (reported true).
func openOrNull(dec *json.Decoder, want json.Delim) (null bool, err error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return true, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return false, fmt.Errorf("found %v where %q was expected", tok, string(want))
	}
	return false, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v where %q was expected", tok, string(want))
	}
	return nil
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("found %v where an object key was expected", tok)
	}
	return key, nil
}
