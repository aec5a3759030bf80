package runcoordinator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// The checks of /readyz, in the order it reports them. /readyz passes when
// all pass: the replica leads and decides. A replica that does not lead is
// healthy (/healthz) but not ready, so "ready" names the one replica whose
// answers count. Each check is also served alone, as kube-apiserver serves
// /readyz/<check>: the Deployment's readiness probe asks only
// /readyz/election, which a healthy standby passes (deploy/coordinator.yaml
// says why).
const (
	// checkElection: this replica has read or written the election Lease
	// since it started, so its credentials and the apiserver work and it
	// takes part in the election. It stays passed through later errors;
	// a lead lost to them shows in the other two checks.
	checkElection = "election"
	// checkLeading: this replica holds the election Lease.
	checkLeading = "leading"
	// checkSynced: the coordinator it runs while leading has read every
	// Node and the slot Leases (slots.Coordinator.Synced).
	checkSynced = "synced"
)

var checkNames = []string{checkElection, checkLeading, checkSynced}

// readiness is what /readyz reports. The election and the lead write it;
// the probes read it.
type readiness struct {
	identity string

	mu sync.Mutex
	// inElection: the election Lease was read or written.
	inElection bool
	// leader is the election Lease's holder as last seen; "" for none.
	leader  string
	leading bool
	// synced is the Synced of the coordinator of the current lead; nil
	// between leads.
	synced func() bool
}

func newReadiness(identity string) *readiness { return &readiness{identity: identity} }

// observeLeader is election.Options.OnLeader.
func (r *readiness) observeLeader(identity string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inElection, r.leader = true, identity
}

// setLeading is told by election.Options.OnLeading.
func (r *readiness) setLeading(leading bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leading = leading
	if leading {
		// Holding the Lease is having written it, even before client-go
		// reports the new holder (it does so on a goroutine of its own).
		r.inElection, r.leader = true, r.identity
	}
}

// setSynced installs the current lead's coordinator's Synced; nil when the
// lead ends.
func (r *readiness) setSynced(synced func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced = synced
}

// check runs the named check: nil when it passes.
func (r *readiness) check(name string) error {
	r.mu.Lock()
	inElection, leader, leading, synced := r.inElection, r.leader, r.leading, r.synced
	r.mu.Unlock()
	switch name {
	case checkElection:
		if !inElection {
			return errors.New("the election Lease has not been read yet")
		}
	case checkLeading:
		switch {
		case leading:
		case leader != "" && leader != r.identity:
			return fmt.Errorf("standing by: %s leads", leader)
		default:
			return errors.New("standing by: campaigning for the lead")
		}
	case checkSynced:
		switch {
		case !leading || synced == nil:
			return errors.New("not leading, so not reading the Nodes and slot Leases")
		case !synced():
			return errors.New("the Nodes and slot Leases are not read yet; no request is answered until they are")
		}
	default:
		return fmt.Errorf("no check %q", name)
	}
	return nil
}

// handler serves /healthz and /readyz in the kube-apiserver manner: "ok",
// or 503 with a line per check; ?verbose lists the checks when they pass
// too.
func (r *readiness) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive is serving: a standby is healthy, and so is a leader
		// whose requests fail, since restarting it would not help; it
		// loses the lead to a replica that can renew it.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	serve := func(w http.ResponseWriter, req *http.Request, names []string) {
		var report strings.Builder
		ok := true
		for _, n := range names {
			if err := r.check(n); err != nil {
				ok = false
				fmt.Fprintf(&report, "[-]%s failed: %v\n", n, err)
			} else {
				fmt.Fprintf(&report, "[+]%s ok\n", n)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprint(w, report.String(), "readyz check failed\n")
			return
		}
		if _, verbose := req.URL.Query()["verbose"]; verbose {
			_, _ = fmt.Fprint(w, report.String())
		}
		_, _ = fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) { serve(w, req, checkNames) })
	for _, n := range checkNames {
		mux.HandleFunc("/readyz/"+n, func(w http.ResponseWriter, req *http.Request) { serve(w, req, []string{n}) })
	}
	return mux
}
