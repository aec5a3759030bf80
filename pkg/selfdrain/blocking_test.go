package selfdrain

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A running drain's record names what holds it: the budget that refuses a
// pod's eviction, and the pod. Once the pod is gone, so is its blocker.
func TestDrainRecordNamesItsBlockersWhileRunning(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.onEvict(func(ev eviction) error {
		if ev.key == "ns/a" && len(h.evicted()) <= 8 {
			return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
		}
		return nil
	})
	// Every record the drain writes, in order.
	var mu sync.Mutex
	var written []*Status
	h.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p) == nil {
			if raw, ok := p.Metadata.Annotations[StatusAnnotation]; ok {
				if st, err := DecodeStatus(raw); err == nil {
					mu.Lock()
					written = append(written, st)
					mu.Unlock()
				}
			}
		}
		return false, nil, nil
	})
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseSucceeded || len(st.Blockers) != 0 {
		t.Errorf("final status %s, want Succeeded without blockers", st.Encode())
	}
	mu.Lock()
	defer mu.Unlock()
	var named *Blocker
	for _, w := range written {
		for _, b := range w.Blockers {
			if w.Phase == PhaseRunning && b.Pod == "ns/a" && b.Reason == BlockerPodDisruptionBudget && b.PodDisruptionBudget == "ns/web-pdb" {
				named = &b
			}
			if b.Pod != "ns/a" {
				t.Errorf("record %s names %s, which no budget refused", w.Encode(), b.Pod)
			}
		}
	}
	if named == nil {
		t.Fatalf("no Running record named ns/a held by PodDisruptionBudget ns/web-pdb; records written: %d", len(written))
	}
	if named.Detail != "The disruption budget web-pdb needs 1 healthy pods and has 1 currently" {
		t.Errorf("blocker detail %q, want the budget's refusal", named.Detail)
	}
	if last := written[len(written)-1]; last.Phase != PhaseSucceeded || len(last.Blockers) != 0 {
		t.Errorf("last record written %s, want Succeeded without blockers", last.Encode())
	}
}
