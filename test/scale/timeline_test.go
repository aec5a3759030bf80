package scale

import (
	"math"
	"sort"
	"testing"
	"time"
)

// nodeRound is one node's way through a rolling maintenance, as the
// benchmark's own watch of the Nodes saw it. A zero time is a step not
// (yet) seen.
type nodeRound struct {
	// asked: the maintenance annotation appeared.
	asked time.Time
	// granted and released: the coordinator's grant (the Node's
	// node-agent.io/drain-slot annotation) turned Granted for the node's
	// request, and then anything else (the request withdrawn, the grant
	// changed): the node held a drain slot in between.
	granted, released time.Time
	// started and drained: the maintenance status turned Running, and
	// then anything else (Succeeded): the node drained in between.
	started, drained time.Time
}

// span is a stretch of time, in seconds from a round's start; an open
// span lasts to the round's end.
type span struct {
	from, to float64
	open     bool
}

// level is a count that holds from at until the next level.
type level struct {
	at float64
	n  int
}

// occupancy turns the spans into the count of spans open over time: a
// level at every change, starting with 0 at 0 and ending with 0 at end.
func occupancy(spans []span, end float64) []level {
	type edge struct {
		at float64
		d  int
	}
	var edges []edge
	for _, s := range spans {
		to := s.to
		if s.open {
			to = end
		}
		if to <= s.from {
			continue
		}
		edges = append(edges, edge{s.from, +1}, edge{to, -1})
	}
	sort.SliceStable(edges, func(i, j int) bool { return edges[i].at < edges[j].at })
	out := []level{{0, 0}}
	n := 0
	for i, e := range edges {
		n += e.d
		if i+1 < len(edges) && edges[i+1].at == e.at {
			continue // one level per instant
		}
		if last := &out[len(out)-1]; last.at == e.at {
			last.n = n
		} else {
			out = append(out, level{e.at, n})
		}
	}
	if out[len(out)-1].at < end {
		out = append(out, level{end, 0})
	}
	return out
}

// countAt is the count of levels at t.
func countAt(levels []level, t float64) int {
	i := sort.Search(len(levels), func(i int) bool { return levels[i].at > t })
	if i == 0 {
		return 0
	}
	return levels[i-1].n
}

// meanWhile is the time-weighted mean of a over the time in which w is at
// least min, and how long that was, in seconds.
func meanWhile(a, w []level, min int, end float64) (mean, during float64) {
	times := make([]float64, 0, len(a)+len(w))
	for _, l := range a {
		times = append(times, l.at)
	}
	for _, l := range w {
		times = append(times, l.at)
	}
	times = append(times, end)
	sort.Float64s(times)
	var sum float64
	for i := 0; i+1 < len(times); i++ {
		t0, t1 := times[i], math.Min(times[i+1], end)
		if t1 <= t0 {
			continue
		}
		if countAt(w, t0) >= min {
			sum += float64(countAt(a, t0)) * (t1 - t0)
			during += t1 - t0
		}
	}
	if during == 0 {
		return math.NaN(), 0
	}
	return sum / during, during
}

// roundLevels is what a round's draining picture and figures are made of:
// the nodes waiting (asked, not yet draining), draining and holding a slot,
// over the seconds from origin to end.
type roundLevels struct {
	waiting, draining, holding []level
	end                        float64
}

func levelsOf(rounds map[string]nodeRound, origin, end time.Time) roundLevels {
	sec := func(t time.Time) float64 { return t.Sub(origin).Seconds() }
	e := sec(end)
	var waiting, draining, holding []span
	for _, r := range rounds {
		if r.asked.IsZero() {
			continue
		}
		waiting = append(waiting, span{from: sec(r.asked), to: sec(r.started), open: r.started.IsZero()})
		if !r.started.IsZero() {
			draining = append(draining, span{from: sec(r.started), to: sec(r.drained), open: r.drained.IsZero()})
		}
		if !r.granted.IsZero() {
			holding = append(holding, span{from: sec(r.granted), to: sec(r.released), open: r.released.IsZero()})
		}
	}
	return roundLevels{waiting: occupancy(waiting, e), draining: occupancy(draining, e), holding: occupancy(holding, e), end: e}
}

// stepMedians are, over a round's nodes, the median seconds of each step a
// node takes with its slot: from the grant until its status is Running,
// Running (the drain), and from the end of the drain until the grant is
// gone (the slot given back and the coordinator's answer).
type stepMedians struct {
	grantToRunning, running, drainedToReleased float64
}

func medians(rounds map[string]nodeRound) stepMedians {
	var a, b, c []float64
	for _, r := range rounds {
		if !r.granted.IsZero() && !r.started.IsZero() {
			a = append(a, r.started.Sub(r.granted).Seconds())
		}
		if !r.started.IsZero() && !r.drained.IsZero() {
			b = append(b, r.drained.Sub(r.started).Seconds())
		}
		if !r.drained.IsZero() && !r.released.IsZero() {
			c = append(c, r.released.Sub(r.drained).Seconds())
		}
	}
	return stepMedians{median(a), median(b), median(c)}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

func TestOccupancy(t *testing.T) {
	got := occupancy([]span{{from: 1, to: 3}, {from: 2, to: 3}, {from: 3, open: true}, {from: 4, to: 4}}, 5)
	want := []level{{0, 0}, {1, 1}, {2, 2}, {3, 1}, {5, 0}}
	if len(got) != len(want) {
		t.Fatalf("occupancy = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("occupancy = %v, want %v", got, want)
		}
	}
	for _, c := range []struct {
		at   float64
		want int
	}{{-1, 0}, {0.5, 0}, {1, 1}, {2.5, 2}, {3, 1}, {4.9, 1}, {5, 0}} {
		if n := countAt(got, c.at); n != c.want {
			t.Errorf("countAt(%v) = %d, want %d", c.at, n, c.want)
		}
	}
}

func TestMeanWhile(t *testing.T) {
	// Waiting: 4 until 2 s, then 1 until 4 s. Draining: 1 for the first
	// second, 3 after.
	w := []level{{0, 4}, {2, 1}, {4, 0}}
	a := []level{{0, 1}, {1, 3}, {4, 0}}
	mean, during := meanWhile(a, w, 2, 4)
	if during != 2 || mean != 2 {
		t.Errorf("meanWhile = %v over %v s, want 2 over 2 s", mean, during)
	}
	if mean, during := meanWhile(a, w, 5, 4); !math.IsNaN(mean) || during != 0 {
		t.Errorf("never that many waiting: meanWhile = %v over %v s, want NaN over 0 s", mean, during)
	}
}

func TestLevelsOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rounds := map[string]nodeRound{
		"a": {asked: at(0), granted: at(1), started: at(1.5), drained: at(3), released: at(3.2)},
		"b": {asked: at(0), granted: at(3.3), started: at(3.5)}, // still draining at the end
		"c": {asked: at(0.5)},                                   // never got a slot
		"d": {},                                                 // not asked
	}
	l := levelsOf(rounds, t0, at(4))
	for _, c := range []struct {
		name   string
		levels []level
		at     float64
		want   int
	}{
		{"waiting", l.waiting, 0.2, 2}, {"waiting", l.waiting, 1, 3}, {"waiting", l.waiting, 2, 2}, {"waiting", l.waiting, 3.6, 1},
		{"draining", l.draining, 2, 1}, {"draining", l.draining, 3.2, 0}, {"draining", l.draining, 3.9, 1},
		{"holding", l.holding, 3.1, 1}, {"holding", l.holding, 3.25, 0}, {"holding", l.holding, 3.9, 1},
	} {
		if n := countAt(c.levels, c.at); n != c.want {
			t.Errorf("%s at %v s: %d, want %d (levels %v)", c.name, c.at, n, c.want, c.levels)
		}
	}
	if m := medians(rounds); m.grantToRunning != 0.5 || m.running != 1.5 || math.Abs(m.drainedToReleased-0.2) > 1e-9 {
		t.Errorf("medians = %+v, want 0.5, 1.5 and 0.2 s", m)
	}
	if mean, during := meanWhile(l.draining, l.waiting, 2, l.end); during != 3.5 || math.Abs(mean-(1.5*1)/3.5) > 1e-9 {
		t.Errorf("draining while 2 or more wait: %v over %v s, want %v over 3.5 s", mean, during, 1.5/3.5)
	}
}
