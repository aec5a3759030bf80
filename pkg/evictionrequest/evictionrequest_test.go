package evictionrequest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-agent/node-agent/pkg/evictionrequest/spec"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]spec.Mode{"": spec.Eviction, "eviction": spec.Eviction, "evictionRequest": spec.Request, "auto": spec.Auto} {
		if got, err := spec.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"EvictionRequest", "evictionrequest", "both", " auto"} {
		if _, err := spec.ParseMode(bad); err == nil {
			t.Errorf("ParseMode(%q): no error", bad)
		}
	}
}

func TestChoose(t *testing.T) {
	boom := errors.New("discovery failed")
	for _, c := range []struct {
		name    string
		mode    spec.Mode
		served  bool
		derr    error
		use     bool
		wantErr bool
	}{
		{"eviction, served", spec.Eviction, true, nil, false, false},
		{"request, served", spec.Request, true, nil, true, false},
		{"request, not served: refused", spec.Request, false, nil, false, true},
		{"request, discovery failed: refused", spec.Request, false, boom, false, true},
		{"auto, served", spec.Auto, true, nil, true, false},
		{"auto, not served: pods/eviction", spec.Auto, false, nil, false, false},
		{"auto, discovery failed: pods/eviction", spec.Auto, false, boom, false, false},
		{"unknown", spec.Mode("x"), true, nil, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			use, why, err := Choose(c.mode, c.served, c.derr)
			if use != c.use || (err != nil) != c.wantErr || (err == nil && why == "") {
				t.Errorf("Choose = %v, %q, %v; want use %v, error %v", use, why, err, c.use, c.wantErr)
			}
		})
	}
}

func TestResponders(t *testing.T) {
	got, err := Responders([]byte(`{"spec":{"evictionResponders":[{"name":"kubevirt.io/migration","priority":10000},{"name":"imperative-eviction.k8s.io/evictor","priority":100}]}}`))
	if err != nil || !slices.Equal(got, []string{"kubevirt.io/migration", ImperativeResponder}) {
		t.Fatalf("Responders = %v, %v", got, err)
	}
	if own := OwnResponders(got); !slices.Equal(own, []string{"kubevirt.io/migration"}) {
		t.Errorf("OwnResponders = %v", own)
	}
	if got, err := Responders([]byte(`{"spec":{}}`)); err != nil || len(got) != 0 {
		t.Errorf("a pod without responders: %v, %v", got, err)
	}
	if _, err := Responders([]byte(`{"spec":`)); err == nil {
		t.Error("malformed JSON: no error")
	}
}

func TestFor(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "1234"}}
	er := For(p)
	if er.Name != "node-agent-1234" || er.Namespace != "shop" || er.Spec.Requester != Requester || er.Spec.Intent != IntentEviction ||
		er.Spec.Target.Pod == nil || er.Spec.Target.Pod.Name != "web" || er.Spec.Target.Pod.UID != "1234" {
		t.Errorf("For = %+v", er)
	}
	if len(er.OwnerReferences) != 1 || er.OwnerReferences[0].UID != "1234" || er.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("owner references %+v: want the pod, so the request goes with it", er.OwnerReferences)
	}
}

// fakeAPI answers as the apiserver would for one pod.
// existing, when set, is the request already there under that name: Create
// returns it, as the apiserver's AlreadyExists and a read would.
type fakeAPI struct {
	createErr   error
	status      Status
	podJSON     string
	existing    *EvictionRequest
	resubmitErr error
	created     []*EvictionRequest
	resubmitted []string
	gets, reads int
}

func (f *fakeAPI) Create(_ context.Context, er *EvictionRequest) (*EvictionRequest, error) {
	if f.createErr != nil {
		return nil, f.createErr
	}
	if f.existing != nil {
		out := *f.existing
		return &out, nil
	}
	f.created = append(f.created, er)
	out := *er
	out.Status = f.status
	return &out, nil
}

func (f *fakeAPI) Get(_ context.Context, ns, name string) (*EvictionRequest, error) {
	f.gets++
	var er *EvictionRequest
	if f.existing != nil {
		er = f.existing
	} else if len(f.created) > 0 {
		er = f.created[len(f.created)-1]
	}
	if er == nil || er.Namespace != ns || er.Name != name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: GroupVersion.Group, Resource: Resource}, name)
	}
	out := *er
	out.Status = f.status
	return &out, nil
}

func (f *fakeAPI) Withdraw(context.Context, string, string) error { return nil }

func (f *fakeAPI) Resubmit(_ context.Context, ns, name string) error {
	f.resubmitted = append(f.resubmitted, ns+"/"+name)
	return f.resubmitErr
}

func (f *fakeAPI) PodJSON(context.Context, string, string) ([]byte, error) {
	f.reads++
	return []byte(f.podJSON), nil
}

func TestEvict(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "u1"}}
	withResponder := `{"spec":{"evictionResponders":[{"name":"test.node-agent.io/responder","priority":10000}]}}`
	failed := Status{Conditions: []metav1.Condition{{Type: ConditionFailed, Status: metav1.ConditionTrue, Reason: "EvictionFailed", Message: "no target"}}}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "lifecycle.k8s.io", Resource: Resource}, "x", errors.New("no"))
	for _, c := range []struct {
		name         string
		api          *fakeAPI
		fallback     bool
		awaiting     bool
		refused      bool
		failedReason string
	}{
		{name: "no responder: node-agent evicts", api: &fakeAPI{podJSON: `{"spec":{}}`}, fallback: true},
		{name: "only the imperative responder: node-agent evicts", api: &fakeAPI{podJSON: `{"spec":{"evictionResponders":[{"name":"imperative-eviction.k8s.io/evictor","priority":100}]}}`}, fallback: true},
		{name: "a responder of its own: left to it", api: &fakeAPI{podJSON: withResponder}, awaiting: true},
		{name: "the responder failed: node-agent evicts", api: &fakeAPI{podJSON: withResponder, status: failed}, fallback: true, failedReason: "EvictionFailed: no target"},
		{name: "creation refused", api: &fakeAPI{createErr: forbidden}, refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			evicted := false
			out, err := Evict(context.Background(), c.api, pod, &Memo{}, func(context.Context) error { evicted = true; return nil })
			var aw *AwaitingResponder
			if evicted != c.fallback || errors.As(err, &aw) != c.awaiting || errors.Is(err, ErrCreateRefused) != c.refused || out.Failed != c.failedReason {
				t.Errorf("Evict = %+v, %v; fallback called %v", out, err, evicted)
			}
			if out.Requested != !c.refused {
				t.Errorf("Requested = %v", out.Requested)
			}
			if c.awaiting && (aw.Request != "ns/node-agent-u1" || !slices.Equal(aw.Responders, []string{"test.node-agent.io/responder"})) {
				t.Errorf("awaiting %+v", aw)
			}
		})
	}
}

// A request found under node-agent's name is used only when it is
// node-agent's: one a tenant made first (another requester, or another pod)
// is left alone and the pod goes through pods/eviction; node-agent's own,
// withdrawn by an earlier maintenance, is asked for again.
func TestEvictAdoptsOnlyItsOwnRequest(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "u1"}}
	withResponder := `{"spec":{"evictionResponders":[{"name":"test.node-agent.io/responder","priority":10000}]}}`
	ours := For(pod)
	squat := For(pod)
	squat.Spec.Requester = "tenant.example.com/hold"
	squat.Spec.Intent = IntentWithdrawn
	other := For(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "else", Namespace: "ns", UID: "u2"}})
	other.Name = Name(pod)
	withdrawn := For(pod)
	withdrawn.Spec.Intent = IntentWithdrawn

	for _, c := range []struct {
		name        string
		api         *fakeAPI
		fallback    bool
		awaiting    bool
		requested   bool
		foreign     string
		resubmitted bool
		wantErr     bool
	}{
		{name: "its own, in force", api: &fakeAPI{podJSON: withResponder, existing: ours}, awaiting: true, requested: true},
		{name: "another requester's", api: &fakeAPI{podJSON: withResponder, existing: squat}, fallback: true, foreign: `requester "tenant.example.com/hold"`},
		{name: "another pod's", api: &fakeAPI{podJSON: withResponder, existing: other}, fallback: true, foreign: "targets another pod"},
		{name: "its own, withdrawn", api: &fakeAPI{podJSON: withResponder, existing: withdrawn}, awaiting: true, requested: true, resubmitted: true},
		{name: "its own, withdrawn, and asking again fails", api: &fakeAPI{podJSON: withResponder, existing: withdrawn, resubmitErr: errors.New("boom")},
			requested: true, resubmitted: true, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			evicted := false
			out, err := Evict(context.Background(), c.api, pod, &Memo{}, func(context.Context) error { evicted = true; return nil })
			var aw *AwaitingResponder
			if evicted != c.fallback || errors.As(err, &aw) != c.awaiting || out.Requested != c.requested {
				t.Errorf("Evict = %+v, %v; fallback called %v", out, err, evicted)
			}
			if (c.foreign == "") != (out.Foreign == "") || !strings.Contains(out.Foreign, c.foreign) {
				t.Errorf("Foreign = %q; want it to contain %q", out.Foreign, c.foreign)
			}
			if got := len(c.api.resubmitted) == 1 && c.api.resubmitted[0] == "ns/node-agent-u1"; got != c.resubmitted {
				t.Errorf("resubmitted %v; want %v", c.api.resubmitted, c.resubmitted)
			}
			if c.wantErr && (err == nil || aw != nil || !strings.Contains(err.Error(), "withdrawn by an earlier maintenance")) {
				t.Errorf("err = %v; want the failed resubmission named", err)
			}
		})
	}
}

// A retry while the pod's responder works reads the request once: no
// create, no read of the pod. A responder's Failed condition seen on that
// read still sends the pod to the fallback; a request deleted meanwhile is
// made again.
func TestEvictRetryReadsTheRequestOnly(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "u1"}}
	api := &fakeAPI{podJSON: `{"spec":{"evictionResponders":[{"name":"test.node-agent.io/responder","priority":10000}]}}`}
	var memo Memo
	evicted := false
	fallback := func(context.Context) error { evicted = true; return nil }
	var aw *AwaitingResponder
	for i := range 3 {
		if _, err := Evict(context.Background(), api, pod, &memo, fallback); !errors.As(err, &aw) {
			t.Fatalf("attempt %d: %v, want to wait for the responder", i+1, err)
		}
	}
	if len(api.created) != 1 || api.gets != 2 || api.reads != 1 {
		t.Errorf("3 attempts made %d creates, %d reads of the request, %d of the pod; want 1, 2, 1", len(api.created), api.gets, api.reads)
	}
	api.status = Status{Conditions: []metav1.Condition{{Type: ConditionFailed, Status: metav1.ConditionTrue, Reason: "Gave", Message: "up"}}}
	if out, err := Evict(context.Background(), api, pod, &memo, fallback); err != nil || !evicted || out.Failed != "Gave: up" {
		t.Errorf("after the responder failed: %+v, %v, fallback %v", out, err, evicted)
	}
	api.status, api.created = Status{}, nil
	if _, err := Evict(context.Background(), api, pod, &memo, fallback); !errors.As(err, &aw) || len(api.created) != 1 {
		t.Errorf("the request deleted meanwhile: %v, %d created; want it made again", err, len(api.created))
	}
}
