package agent

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Health holds the readiness checks and the informational details served on
// /readyz. /healthz reports that the process serves requests at all.
type Health struct {
	mu      sync.RWMutex
	checks  map[string]func() error
	details map[string]string
}

// NewHealth returns an empty health registry.
func NewHealth() *Health {
	return &Health{checks: map[string]func() error{}, details: map[string]string{}}
}

// AddReadyCheck adds a check that must pass for /readyz to report ready.
func (h *Health) AddReadyCheck(name string, check func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = check
}

// SetDetail records a line shown on /readyz that does not affect readiness,
// for example that no logind was found on this host.
func (h *Health) SetDetail(name, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if detail == "" {
		delete(h.details, name)
		return
	}
	h.details[name] = detail
}

// Ready runs every check and reports the combined result and a report
// listing each check, in name order.
func (h *Health) Ready() (bool, string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	names := make([]string, 0, len(h.checks))
	for n := range h.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	ok := true
	var b strings.Builder
	for _, n := range names {
		if err := h.checks[n](); err != nil {
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: %v\n", n, err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", n)
		}
	}
	dnames := make([]string, 0, len(h.details))
	for n := range h.details {
		dnames = append(dnames, n)
	}
	sort.Strings(dnames)
	for _, n := range dnames {
		fmt.Fprintf(&b, "[i]%s: %s\n", n, h.details[n])
	}
	return ok, b.String()
}

// Handler serves /healthz and /readyz in the kube-apiserver manner: a short
// "ok" body, and the per-check report with ?verbose or on failure.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, report := h.Ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprint(w, report, "readyz check failed\n")
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			_, _ = fmt.Fprint(w, report)
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}
