package slots

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// What a Queued answer says beyond which pool is full: the nodes holding
// that pool's slots, since when, and the request's place in the pool's
// queue. The agent copies the answer into its maintenance record and
// condition (its token reads no Lease and no other Node), so a person
// reading one Node learns what it waits for.
//
// Every change of that text is a write to the waiting Node, and then the
// agent's own writes of its record and condition. Naming the holders in
// every waiting node's answer would rewrite all of them at each grant: with
// a limit of 1, a rolling maintenance of n nodes would cost O(n²) writes.
// So only the first ExplainedPlaces requests of a pool's queue are told who
// holds the slots and their exact place; the ones behind them are told only
// that they are further back, a text that stays the same until they come
// near the head. A grant then rewrites at most ExplainedPlaces answers per
// pool. The answer gives when each holder took its slot, never how long
// ago, so it does not change as time passes: the reader works out the
// duration.
const (
	// ExplainedPlaces is how many requests at the head of a pool's queue
	// are told who holds the pool's slots, and their place in the queue.
	ExplainedPlaces = 3
	// NamedHolders bounds the holders one answer names.
	NamedHolders = 3
)

// holder is a node that holds a slot, and since when.
type holder struct {
	node  string
	since time.Time
}

// explain is what a Queued answer adds to reason, the pool p's: its
// holders, when p is full (rather than blocked by an earlier request that
// waits for another pool), and the request's place in p's queue.
func (p *poolState) explain(full bool) string {
	if p.queued >= ExplainedPlaces {
		return fmt.Sprintf("; place %d or later in the queue of pool %s", ExplainedPlaces+1, p.Name)
	}
	var b strings.Builder
	if full && len(p.holders) > 0 {
		b.WriteString("; slots held by " + p.holderList())
	}
	fmt.Fprintf(&b, "; place %d in the queue of pool %s", p.queued+1, p.Name)
	return b.String()
}

// holderList names at most NamedHolders of p's holders, those that took
// their slot first first, each with since when it holds it.
func (p *poolState) holderList() string {
	hs := slices.Clone(p.holders)
	slices.SortFunc(hs, func(a, b holder) int { return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.node, b.node)) })
	var names []string
	for _, h := range hs[:min(len(hs), NamedHolders)] {
		if h.since.IsZero() {
			names = append(names, h.node)
			continue
		}
		names = append(names, h.node+" since "+h.since.UTC().Format(time.RFC3339))
	}
	s := strings.Join(names, ", ")
	if more := len(hs) - len(names); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}
