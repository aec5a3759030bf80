package agent

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthReadyz(t *testing.T) {
	h := NewHealth()
	synced := false
	h.AddReadyCheck("node-synced", func() error {
		if !synced {
			return errors.New("not yet")
		}
		return nil
	})
	h.SetDetail("shutdown-guard", "unavailable: no system bus")
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while not ready, want 200: liveness must not depend on readiness", code)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]node-synced failed: not yet") {
		t.Errorf("/readyz before sync = %d %q", code, body)
	}
	synced = true
	if code, body := get("/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz after sync = %d %q", code, body)
	}
	code, body = get("/readyz?verbose")
	if code != http.StatusOK || !strings.Contains(body, "[+]node-synced ok") || !strings.Contains(body, "[i]shutdown-guard: unavailable: no system bus") {
		t.Errorf("/readyz?verbose = %d %q", code, body)
	}
	h.SetDetail("shutdown-guard", "")
	if _, body := get("/readyz?verbose"); strings.Contains(body, "shutdown-guard") {
		t.Errorf("cleared detail still shown: %q", body)
	}
}

func TestNewRequiresNodeAndClient(t *testing.T) {
	if _, err := New(""); err == nil || !strings.Contains(err.Error(), "node name") {
		t.Errorf("New(\"\") = %v, want a node name error", err)
	}
	if _, err := New("node-1"); err == nil || !strings.Contains(err.Error(), "client") {
		t.Errorf("New without client = %v, want a client error", err)
	}
}
