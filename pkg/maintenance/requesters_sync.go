package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// recordedRequesters is the requesters list beside the record on node, or
// the one the controller wrote last while the cache does not show it yet.
// A list that does not parse counts as none; the next write replaces it.
func (c *Controller) recordedRequesters(node *corev1.Node) []Requester {
	raw := node.Annotations[RequestersAnnotation]
	if c.sent != c.sentOver && raw == c.sentOver {
		raw = c.sent
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{RequestersAnnotation: raw}}}
	list, err := ParseRequesters(n)
	if err != nil {
		c.log.Warn("Requesters list on the Node does not parse; writing it anew", "err", err)
		return nil
	}
	return list
}

// owners reads the owner annotations of node as requesters
// (ownerRequesters). Each refused value, and owners past MaxOwners, are
// reported once with a Warning Event.
func (c *Controller) owners(node *corev1.Node, recorded []Requester) []Requester {
	parsed := parseOwners(node)
	seen := map[string]bool{}
	served := 0
	for _, o := range parsed {
		seen[o.key] = true
		if o.refusal == nil {
			served++
		}
		bad := ""
		var re *reasontext.RefusedError
		switch {
		case errors.As(o.refusal, &re):
			bad = re.Value
		case served > MaxOwners:
			bad = "(past " + fmt.Sprint(MaxOwners) + ")"
		}
		if bad == "" {
			delete(c.badOwners, o.key)
			continue
		}
		if c.badOwners[o.key] == bad {
			continue
		}
		if c.badOwners == nil {
			c.badOwners = map[string]string{}
		}
		c.badOwners[o.key] = bad
		if o.refusal != nil {
			c.log.Warn("Owner maintenance request refused; nothing on the node changes for it", "err", o.refusal, "owner", o.owner)
			c.engine.Event(corev1.EventTypeWarning, "MaintenanceRequestRefused",
				"%v. Nothing on the node changed for owner %s: a request it made before stays until the annotation is removed", o.refusal, o.owner)
		} else {
			c.log.Warn("More owner maintenance requests than are served; this one waits for an earlier one to end", "owner", o.owner, "max", MaxOwners)
			c.engine.Event(corev1.EventTypeWarning, "MaintenanceRequestRefused",
				"%s: at most %d owner annotations are served at once; this one is listed once an earlier owner (by name) ends its request", o.key, MaxOwners)
		}
	}
	for k := range c.badOwners {
		if !seen[k] {
			delete(c.badOwners, k)
		}
	}
	return ownerRequesters(parsed, recorded)
}

// syncRequesters writes the requesters that hold the maintenance now beside
// the record, when they changed, and removes the list once none asks. When
// some requesters end while others stay, an Event on the Node says which
// ended and who still holds the maintenance: the node stays cordoned and
// drained for them.
func (c *Controller) syncRequesters(ctx context.Context, node *corev1.Node, req Requests, recorded []Requester) error {
	var want []Requester
	if req.wanted() {
		want = req.Requesters(recorded, c.engine.Now())
	}
	write := want
	if len(recorded) == 0 && !worthListing(want) {
		// The record names this one requester already: a list of it
		// would cost two Node patches per maintenance (issue 43's drain
		// counts them) and say nothing more. Once listed, the list is
		// kept until the maintenance ends, so that who still holds it
		// stays shown.
		write = nil
	}
	if sameRequesters(write, recorded) {
		return nil
	}
	var value *string
	if len(write) > 0 {
		b, err := json.Marshal(write)
		if err != nil {
			return err
		}
		s := string(b)
		value = &s
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{RequestersAnnotation: value}}})
	if err != nil {
		return err
	}
	if _, err := c.engine.Client.CoreV1().Nodes().Patch(ctx, c.node, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: selfdrain.FieldManager}); err != nil {
		return fmt.Errorf("writing the maintenance requesters of Node %s: %w", c.node, err)
	}
	c.sentOver = node.Annotations[RequestersAnnotation]
	c.sent = ""
	if value != nil {
		c.sent = *value
	}
	if ended := gone(recorded, want); len(ended) > 0 && len(want) > 0 {
		c.log.Info("Maintenance requesters ended; the maintenance goes on for the others", "ended", names(ended), "holders", names(want))
		c.engine.Event(corev1.EventTypeNormal, "MaintenanceRequesterEnded",
			"%s ended its request; the node stays in maintenance for %s", names(ended), names(want))
	}
	if joined := gone(want, recorded); len(joined) > 0 && len(recorded) > 0 {
		c.log.Info("Maintenance requesters joined the maintenance", "joined", names(joined), "holders", names(want))
	}
	return nil
}

// worthListing says whether requesters need a list beside the record: more
// than one, or one the record does not name (an owner, or a NodeMaintenance
// object, whose names the record's trigger and reason do not carry). The
// annotation alone, or the reboot controller alone, is the record's trigger.
func worthListing(requesters []Requester) bool {
	switch {
	case len(requesters) > 1:
		return true
	case len(requesters) == 1:
		return requesters[0].Kind == KindOwner || requesters[0].Kind == KindNodeMaintenance
	}
	return false
}
