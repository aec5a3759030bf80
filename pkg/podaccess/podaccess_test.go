package podaccess

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

var podsGR = schema.GroupResource{Resource: "pods"}

// client answers a list of pods with err (nil: the fake's own answer), and
// records the field selector it was asked for.
func client(t *testing.T, err error, selector *string) kube.Interface {
	t.Helper()
	c := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "node-1"}})
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if selector != nil {
			*selector = a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
		}
		if err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return kubetest.Wrap(c)
}

func TestProbe(t *testing.T) {
	forbiddenImp := apierrors.NewForbidden(podsGR, "", errors.New(`user "system:serviceaccount:node-agent:node-agent" cannot impersonate-on:associated-node:list`))
	forbiddenOwn := apierrors.NewForbidden(podsGR, "", errors.New(`User "system:serviceaccount:node-agent:node-agent" cannot list resource "pods"`))
	down := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	for _, tc := range []struct {
		name      string
		node, own error
		want      Mode
		wantErr   string
		wantWhy   []string
	}{
		{name: "impersonation works", want: ModeNode},
		{name: "impersonation refused, own grant", node: forbiddenImp, want: ModeClusterWide,
			wantWhy: []string{"impersonating system:node:node-1 was refused", "impersonate-on:associated-node:list"}},
		{name: "both refused", node: forbiddenImp, own: forbiddenOwn, want: ModeNone,
			wantWhy: []string{"impersonate-on:associated-node:list", `cannot list resource "pods"`}},
		{name: "impersonation rejected by the authenticator", node: apierrors.NewUnauthorized("impersonation not allowed"), own: forbiddenOwn, want: ModeNone},
		{name: "apiserver down: unknown, no mode", node: down, wantErr: "connection refused"},
		{name: "own identity errs after a refusal: unknown", node: forbiddenImp, own: down, wantErr: "as the ServiceAccount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sel string
			p := Prober{Node: client(t, tc.node, &sel), Own: client(t, tc.own, nil), NodeName: "node-1"}
			acc, err := p.Probe(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if acc.Mode != tc.want {
				t.Fatalf("mode %q, want %q (why: %s)", acc.Mode, tc.want, acc.Why)
			}
			if (acc.Client == nil) != (tc.want == ModeNone) {
				t.Errorf("client %v in mode %s", acc.Client, acc.Mode)
			}
			if sel != "spec.nodeName=node-1" {
				t.Errorf("probe listed pods with field selector %q, want only this node's", sel)
			}
			for _, w := range tc.wantWhy {
				if !strings.Contains(acc.Why, w) {
					t.Errorf("why %q lacks %q", acc.Why, w)
				}
			}
			line := acc.Line()
			if tc.want == ModeNone && !strings.Contains(line, "deploy/components/cluster-wide-eviction") {
				t.Errorf("the line for %s names no fix: %s", tc.want, line)
			}
		})
	}
}

func TestNodeConfigImpersonatesTheUserOnly(t *testing.T) {
	cfg := &rest.Config{Host: "https://x", Impersonate: rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}}
	got := NodeConfig(cfg, "node-1")
	if got.Impersonate.UserName != "system:node:node-1" || len(got.Impersonate.Groups) != 0 || len(got.Impersonate.Extra) != 0 || got.Impersonate.UID != "" {
		t.Errorf("impersonation %+v, want the node's user name and nothing else", got.Impersonate)
	}
	if cfg.Impersonate.UserName != "admin" {
		t.Error("NodeConfig changed its argument")
	}
}

func TestReporterSaysEachChangeOnce(t *testing.T) {
	var nodeErr error
	nodeC := fake.NewClientset()
	nodeC.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if nodeErr != nil {
			return true, nil, nodeErr
		}
		return false, nil, nil
	})
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	r := &Reporter{
		Prober:  Prober{Node: kubetest.Wrap(nodeC), Own: client(t, nil, nil), NodeName: "node-1"},
		Logger:  slog.New(slog.NewTextHandler(&buf, nil)),
		Metrics: NewMetrics(reg),
	}
	ctx := context.Background()
	check := func(want Mode) {
		t.Helper()
		acc, err := r.Check(ctx)
		if err != nil || acc.Mode != want {
			t.Fatalf("Check: %v, %v; want %s", acc.Mode, err, want)
		}
		for _, m := range Modes {
			v := testutil.ToFloat64(r.Metrics.Mode.WithLabelValues(string(m)))
			if (v == 1) != (m == want) {
				t.Errorf("node_agent_pod_access{mode=%q} = %v with mode %s", m, v, want)
			}
		}
	}
	check(ModeNode)
	check(ModeNode)
	nodeErr = apierrors.NewForbidden(podsGR, "", errors.New("cannot impersonate-on:associated-node:list"))
	check(ModeClusterWide)
	check(ModeClusterWide)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines for two modes, want one per change:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "podAccess=node") {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], "level=WARN") || !strings.Contains(lines[1], "podAccess=cluster-wide") || !strings.Contains(lines[1], "a stolen token") {
		t.Errorf("second line: %s", lines[1])
	}
}

// Run says once, at start, how the pods will be reached, and returns; an
// apiserver that cannot be asked is a warning, not a failure of the agent.
func TestReporterRunSaysItOnceAtStart(t *testing.T) {
	for _, tt := range []struct {
		name    string
		nodeErr error
		want    string
	}{
		{name: "answered", want: "podAccess=node"},
		{name: "apiserver away", nodeErr: errors.New("connection refused"), want: "asking again before a drain"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := &Reporter{Prober: Prober{Node: client(t, tt.nodeErr, nil), Own: client(t, nil, nil), NodeName: "node-1"},
				Logger: slog.New(slog.NewTextHandler(&buf, nil))}
			if err := r.Run(context.Background()); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Errorf("logged %q, want one line with %q", buf.String(), tt.want)
			}
		})
	}
}

// TestReporterReusesNodeMode: within Reuse an answer of ModeNode is given
// again without a request; after it, or after any other answer, Check asks.
func TestReporterReusesNodeMode(t *testing.T) {
	lists := 0
	var nodeErr error
	nodeC := fake.NewClientset()
	nodeC.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if nodeErr != nil {
			return true, nil, nodeErr
		}
		return false, nil, nil
	})
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	r := &Reporter{
		Prober: Prober{Node: kubetest.Wrap(nodeC), Own: client(t, nil, nil), NodeName: "node-1"},
		Reuse:  time.Minute,
		Now:    func() time.Time { return now },
	}
	check := func(want Mode, wantLists int) {
		t.Helper()
		acc, err := r.Check(context.Background())
		if err != nil || acc.Mode != want || lists != wantLists {
			t.Fatalf("Check: %v, %v after %d node lists; want %s after %d", acc.Mode, err, lists, want, wantLists)
		}
		if want == ModeNode && acc.Client == nil {
			t.Fatal("a kept ModeNode answer lost its client")
		}
	}
	check(ModeNode, 1)
	now = now.Add(59 * time.Second)
	check(ModeNode, 1) // kept
	now = now.Add(time.Second)
	nodeErr = apierrors.NewForbidden(podsGR, "", errors.New("cannot impersonate-on:associated-node:list"))
	check(ModeClusterWide, 2) // Reuse passed: asked again
	check(ModeClusterWide, 3) // not kept
	nodeErr = nil
	check(ModeNode, 4)
	check(ModeNode, 4)
	r.Forget()
	check(ModeNode, 5) // forgotten: asked again
}
