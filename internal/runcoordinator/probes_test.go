package runcoordinator

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadiness: /readyz passes only while this replica leads and its
// coordinator has synced; /readyz/election passes for a standby that has
// read the election Lease; /healthz passes throughout.
func TestReadiness(t *testing.T) {
	const self, other = "coordinator-a", "coordinator-b"
	synced, notSynced := func() bool { return true }, func() bool { return false }
	for _, tc := range []struct {
		name string
		// set brings a fresh readiness to the state under test, as the
		// election and the lead do.
		set func(r *readiness)
		// want is the status of each path; wantIn, words the /readyz body
		// must hold.
		want   map[string]int
		wantIn []string
	}{{
		name: "starting: the election Lease not read yet",
		set:  func(*readiness) {},
		want: map[string]int{"/healthz": 200, "/readyz": 503, "/readyz/election": 503, "/readyz/leading": 503, "/readyz/synced": 503},
		wantIn: []string{"[-]election failed: the election Lease has not been read yet",
			"[-]leading failed: standing by: campaigning", "[-]synced failed: not leading"},
	}, {
		name: "standby: another replica leads",
		set:  func(r *readiness) { r.observeLeader(other) },
		want: map[string]int{"/healthz": 200, "/readyz": 503, "/readyz/election": 200, "/readyz/leading": 503, "/readyz/synced": 503},
		wantIn: []string{"[+]election ok", "[-]leading failed: standing by: " + other + " leads",
			"[-]synced failed: not leading"},
	}, {
		name: "standby: the leader gave the Lease up",
		set: func(r *readiness) {
			r.observeLeader(other)
			r.observeLeader("")
		},
		want:   map[string]int{"/readyz": 503, "/readyz/election": 200, "/readyz/leading": 503},
		wantIn: []string{"[-]leading failed: standing by: campaigning"},
	}, {
		name:   "leading, the coordinator not started yet",
		set:    func(r *readiness) { r.setLeading(true) },
		want:   map[string]int{"/healthz": 200, "/readyz": 503, "/readyz/election": 200, "/readyz/leading": 200, "/readyz/synced": 503},
		wantIn: []string{"[+]election ok", "[+]leading ok", "[-]synced failed: not leading"},
	}, {
		name: "leading, the coordinator not synced",
		set: func(r *readiness) {
			r.setLeading(true)
			r.setSynced(notSynced)
		},
		want:   map[string]int{"/healthz": 200, "/readyz": 503, "/readyz/election": 200, "/readyz/leading": 200, "/readyz/synced": 503},
		wantIn: []string{"[+]leading ok", "[-]synced failed: the Nodes and slot Leases are not read yet"},
	}, {
		name: "leading and synced",
		set: func(r *readiness) {
			r.observeLeader(other)
			r.setLeading(true)
			r.setSynced(synced)
		},
		want: map[string]int{"/healthz": 200, "/readyz": 200, "/readyz/election": 200, "/readyz/leading": 200, "/readyz/synced": 200},
	}, {
		// client-go reports the new holder on a goroutine: a late report
		// of the old leader does not make the leader a standby.
		name: "leading, the old leader reported late",
		set: func(r *readiness) {
			r.setLeading(true)
			r.setSynced(synced)
			r.observeLeader(other)
		},
		want: map[string]int{"/readyz": 200},
	}, {
		name: "lead lost: synced coordinator still winding down",
		set: func(r *readiness) {
			r.setLeading(true)
			r.setSynced(synced)
			r.setLeading(false)
		},
		want:   map[string]int{"/healthz": 200, "/readyz": 503, "/readyz/election": 200, "/readyz/leading": 503, "/readyz/synced": 503},
		wantIn: []string{"[-]leading failed", "[-]synced failed: not leading"},
	}, {
		name: "lead ended: the coordinator returned",
		set: func(r *readiness) {
			r.setLeading(true)
			r.setSynced(synced)
			r.setSynced(nil)
		},
		want:   map[string]int{"/readyz": 503, "/readyz/leading": 200, "/readyz/synced": 503},
		wantIn: []string{"[-]synced failed: not leading"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReadiness(self)
			tc.set(r)
			srv := httptest.NewServer(r.handler())
			defer srv.Close()
			for path, want := range tc.want {
				if code, body := get(t, srv.URL+path); code != want {
					t.Errorf("%s = %d, want %d\n%s", path, code, want, body)
				}
			}
			_, body := get(t, srv.URL+"/readyz?verbose")
			for _, w := range tc.wantIn {
				if !strings.Contains(body, w) {
					t.Errorf("/readyz?verbose lacks %q:\n%s", w, body)
				}
			}
		})
	}
}

// TestReadyzVerbose: a passing /readyz answers "ok", and with ?verbose
// lists every check first; an unknown check is not found.
func TestReadyzVerbose(t *testing.T) {
	r := newReadiness("a")
	r.setLeading(true)
	r.setSynced(func() bool { return true })
	srv := httptest.NewServer(r.handler())
	defer srv.Close()
	if _, body := get(t, srv.URL+"/readyz"); body != "ok\n" {
		t.Errorf("/readyz = %q, want ok", body)
	}
	want := "[+]election ok\n[+]leading ok\n[+]synced ok\nok\n"
	if _, body := get(t, srv.URL+"/readyz?verbose"); body != want {
		t.Errorf("/readyz?verbose = %q, want %q", body, want)
	}
	if code, _ := get(t, srv.URL+"/readyz/nothing"); code != http.StatusNotFound {
		t.Errorf("/readyz/nothing = %d, want 404", code)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
