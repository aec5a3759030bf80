package placement

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

type want struct {
	plugin  Plugin
	reasons []string
	detail  string // substring of Detail
}

type filterCase struct {
	name       string
	nodes      []corev1.Node
	pods       []corev1.Pod
	namespaces []corev1.Namespace
	pod        corev1.Pod
	fits       []string
	rejected   map[string]want
}

func runCases(t *testing.T, cases []filterCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSnapshot(tc.nodes, tc.pods, tc.namespaces, nil)
			before := tc.pod.DeepCopy()
			res := s.Evaluate(&tc.pod)
			if !reflect.DeepEqual(before, &tc.pod) {
				t.Errorf("Evaluate modified the pod")
			}
			checkResult(t, res, tc.fits, tc.rejected)
		})
	}
}

func checkResult(t *testing.T, res Result, fits []string, rejected map[string]want) {
	t.Helper()
	if fits == nil {
		fits = []string{}
	}
	if !reflect.DeepEqual(res.Fits, fits) {
		t.Errorf("fits = %v, want %v (rejected %+v)", res.Fits, fits, res.Rejected)
	}
	if len(res.Rejected) != len(rejected) {
		t.Errorf("rejected = %+v, want %d", res.Rejected, len(rejected))
	}
	for _, r := range res.Rejected {
		w, ok := rejected[r.Node]
		if !ok {
			t.Errorf("unexpected rejection %+v", r)
			continue
		}
		if r.Plugin != w.plugin || !reflect.DeepEqual(r.Reasons, w.reasons) {
			t.Errorf("%s: got %s %q, want %s %q", r.Node, r.Plugin, r.Reasons, w.plugin, w.reasons)
		}
		if !strings.Contains(r.Detail, w.detail) {
			t.Errorf("%s: detail %q lacks %q", r.Node, r.Detail, w.detail)
		}
	}
}

func TestNodeFilters(t *testing.T) {
	unsched := want{NodeUnschedulable, []string{"node(s) were unschedulable"}, "cordoned"}
	taint := func(d string) want { return want{TaintToleration, []string{"node(s) had untolerated taint(s)"}, d} }
	aff := func(d string) want {
		return want{NodeAffinity, []string{"node(s) didn't match Pod's node affinity/selector"}, d}
	}
	cpuModel := "cpu-model.node.kubevirt.io/Skylake-Server"
	runCases(t, []filterCase{
		{name: "cordoned node", nodes: nodes(mkNode("a", nil, cordoned), mkNode("b", nil)),
			pod: mkPod("p", nil), fits: []string{"b"}, rejected: map[string]want{"a": unsched}},
		{name: "cordoned but tolerating the unschedulable taint", nodes: nodes(mkNode("a", nil, cordoned)),
			pod:  mkPod("p", nil, tolerate(corev1.TaintNodeUnschedulable, corev1.TolerationOpExists, corev1.TaintEffectNoSchedule)),
			fits: []string{"a"}},
		{name: "cordoned node stops at NodeUnschedulable before its taint", nodes: nodes(mkNode("a", nil, cordoned,
			withTaint(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule))),
			pod: mkPod("p", nil), rejected: map[string]want{"a": unsched}},
		{name: "NoSchedule taint untolerated", nodes: nodes(mkNode("a", nil, withTaint("kubevirt.io/drain", "draining", corev1.TaintEffectNoSchedule))),
			pod: mkPod("p", nil), rejected: map[string]want{"a": taint("taint kubevirt.io/drain=draining:NoSchedule")}},
		{name: "NoExecute taint untolerated", nodes: nodes(mkNode("a", nil, withTaint("dead", "", corev1.TaintEffectNoExecute))),
			pod: mkPod("p", nil), rejected: map[string]want{"a": taint("taint dead:NoExecute")}},
		{name: "NoSchedule taint tolerated", nodes: nodes(mkNode("a", nil, withTaint("kubevirt.io/drain", "draining", corev1.TaintEffectNoSchedule))),
			pod: mkPod("p", nil, tolerate("kubevirt.io/drain", corev1.TolerationOpExists, "")), fits: []string{"a"}},
		{name: "NoExecute taint tolerated", nodes: nodes(mkNode("a", nil, withTaint("dead", "", corev1.TaintEffectNoExecute))),
			pod: mkPod("p", nil, tolerate("dead", corev1.TolerationOpExists, corev1.TaintEffectNoExecute)), fits: []string{"a"}},
		{name: "PreferNoSchedule ignored", nodes: nodes(mkNode("a", nil, withTaint("soft", "", corev1.TaintEffectPreferNoSchedule))),
			pod: mkPod("p", nil), fits: []string{"a"}},
		{name: "node selector", nodes: nodes(mkNode("a", map[string]string{cpuModel: "true"}), mkNode("b", nil)),
			pod: mkPod("p", nil, nodeSelector(cpuModel, "true")), fits: []string{"a"},
			rejected: map[string]want{"b": aff("lacks " + cpuModel + "=true")}},
		{name: "required affinity In", nodes: nodes(mkNode("a", map[string]string{"disk": "ssd"}), mkNode("b", map[string]string{"disk": "hdd"})),
			pod: mkPod("p", nil, nodeAffinity(req("disk", corev1.NodeSelectorOpIn, "ssd"))), fits: []string{"a"},
			rejected: map[string]want{"b": aff("disk In [ssd] (node has disk=hdd)")}},
		{name: "required affinity NotIn", nodes: nodes(mkNode("a", map[string]string{"disk": "ssd"}), mkNode("b", map[string]string{"disk": "hdd"})),
			pod: mkPod("p", nil, nodeAffinity(req("disk", corev1.NodeSelectorOpNotIn, "ssd"))), fits: []string{"b"},
			rejected: map[string]want{"a": aff("disk NotIn [ssd]")}},
		{name: "required affinity DoesNotExist", nodes: nodes(mkNode("a", map[string]string{"gpu": "x"}), mkNode("b", nil)),
			pod: mkPod("p", nil, nodeAffinity(req("gpu", corev1.NodeSelectorOpDoesNotExist))), fits: []string{"b"},
			rejected: map[string]want{"a": aff("gpu DoesNotExist (node has gpu=x)")}},
		{name: "requested node name", nodes: nodes(mkNode("a", nil), mkNode("b", nil)),
			pod: mkPod("p", nil, func(p *corev1.Pod) { p.Spec.NodeName = "b" }), fits: []string{"b"},
			rejected: map[string]want{"a": {NodeName, []string{"node(s) didn't satisfy plugin(s) [NodeName]"}, "pinned to node(s) b"}}},
	})
}

func TestPreFilterNodeNames(t *testing.T) {
	pinTo := func(names ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: names}}}
	}
	terms := func(ts ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			ensureAffinity(p).NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: ts}}
		}
	}
	outside := want{NodeAffinity, []string{"node(s) didn't satisfy plugin(s) [NodeAffinity]"}, "pinned"}
	s := NewSnapshot(nodes(mkNode("a", nil), mkNode("b", nil), mkNode("c", nil, cordoned)), nil, nil, nil)

	pinned := mkPod("p", nil, terms(pinTo("a"), pinTo("c")))
	res := s.Evaluate(&pinned)
	checkResult(t, res, []string{"a"}, map[string]want{"b": outside,
		"c": {NodeUnschedulable, []string{"node(s) were unschedulable"}, ""}})

	// One term whose two name fields cancel out: the pod is pinned to no node at all.
	conflict := mkPod("p", nil, terms(corev1.NodeSelectorTerm{MatchFields: append(pinTo("a").MatchFields, pinTo("b").MatchFields...)}))
	res = s.Evaluate(&conflict)
	if got, want := res.SchedulerMessage(), "0/3 nodes are available: pod affinity terms conflict."; got != want {
		t.Errorf("conflict: %q, want %q", got, want)
	}

	both := mkPod("p", nil, terms(pinTo("a")), func(p *corev1.Pod) { p.Spec.NodeName = "b" })
	res = s.Evaluate(&both)
	if got, want := res.SchedulerMessage(), "0/3 nodes are available: node(s) didn't satisfy plugin(s) [NodeAffinity NodeName] simultaneously."; got != want {
		t.Errorf("disjoint: %q, want %q", got, want)
	}

	elsewhere := mkPod("p", nil, terms(pinTo("gone")))
	res = s.Evaluate(&elsewhere)
	if got, want := res.SchedulerMessage(), "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."; got != want {
		t.Errorf("missing node: %q, want %q", got, want)
	}
}

func TestUnparsableAffinityRejectsThePodEverywhere(t *testing.T) {
	s := NewSnapshot(nodes(mkNode("a", nil), mkNode("b", nil)), nil, nil, nil)
	bad := term(zone, nil)
	bad.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	p := mkPod("p", nil, podAffinity(bad))
	res := s.Evaluate(&p)
	if len(res.Fits) != 0 || len(res.Rejected) != 2 || res.Rejected[0].Plugin != InterPodAffinity {
		t.Fatalf("got %+v", res)
	}
	if msg := res.SchedulerMessage(); !strings.HasPrefix(msg, "0/2 nodes are available: parsing pod: ") {
		t.Errorf("message %q", msg)
	}
}

func TestNodeResourcesFit(t *testing.T) {
	big := mkPod("big", nil, on("a"), requests("cpu", "3", "memory", "7Gi"))
	runCases(t, []filterCase{
		{name: "fits in what is left", nodes: nodes(mkNode("a", nil)), pods: pods(big),
			pod: mkPod("p", nil, requests("cpu", "1", "memory", "1Gi")), fits: []string{"a"}},
		{name: "insufficient cpu", nodes: nodes(mkNode("a", nil)), pods: pods(big),
			pod:      mkPod("p", nil, requests("cpu", "1500m")),
			rejected: map[string]want{"a": {NodeResourcesFit, []string{"Insufficient cpu"}, "needs 1500m cpu, 1 free of 4 allocatable"}}},
		{name: "insufficient memory", nodes: nodes(mkNode("a", nil)), pods: pods(big),
			pod:      mkPod("p", nil, requests("memory", "2148Mi")),
			rejected: map[string]want{"a": {NodeResourcesFit, []string{"Insufficient memory"}, "needs 2148Mi memory, 1Gi free of 8Gi allocatable"}}},
		{name: "insufficient cpu and memory, both reasons in order", nodes: nodes(mkNode("a", nil)), pods: pods(big),
			pod:      mkPod("p", nil, requests("memory", "2Gi", "cpu", "2")),
			rejected: map[string]want{"a": {NodeResourcesFit, []string{"Insufficient cpu", "Insufficient memory"}, ""}}},
		{name: "terminal and unbound pods are not counted", nodes: nodes(mkNode("a", nil)),
			pods: pods(mkPod("done", nil, on("a"), requests("cpu", "4"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
				mkPod("failed", nil, on("a"), requests("cpu", "4"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
				mkPod("pending", nil, requests("cpu", "4"))),
			pod: mkPod("p", nil, requests("cpu", "4")), fits: []string{"a"}},
		{name: "insufficient extended resource", nodes: nodes(mkNode("a", nil, withAllocatable("devices.kubevirt.io/kvm", "1")), mkNode("b", nil)),
			pods: pods(mkPod("vm", nil, on("a"), requests("devices.kubevirt.io/kvm", "1"))),
			pod:  mkPod("p", nil, requests("devices.kubevirt.io/kvm", "1")),
			rejected: map[string]want{
				"a": {NodeResourcesFit, []string{"Insufficient devices.kubevirt.io/kvm"}, "needs 1 devices.kubevirt.io/kvm, 0 free of 1 allocatable"},
				"b": {NodeResourcesFit, []string{"Insufficient devices.kubevirt.io/kvm"}, "0 free of 0 allocatable"}}},
		{name: "limits-only extended resource defaulted into requests", nodes: nodes(mkNode("a", nil), mkNode("b", nil, withAllocatable("devices.kubevirt.io/tun", "1000"))),
			pod: mkPod("p", nil, limits("devices.kubevirt.io/tun", "1")), fits: []string{"b"},
			rejected: map[string]want{"a": {NodeResourcesFit, []string{"Insufficient devices.kubevirt.io/tun"}, ""}}},
		{name: "too many pods", nodes: nodes(mkNode("a", nil, withAllocatable(corev1.ResourcePods, "1")), mkNode("b", nil)),
			pods: pods(mkPod("one", nil, on("a"))), pod: mkPod("p", nil), fits: []string{"b"},
			rejected: map[string]want{"a": {NodeResourcesFit, []string{"Too many pods"}, "1 pods of 1 allowed"}}},
	})
}

func TestInterPodAffinity(t *testing.T) {
	db := map[string]string{"app": "db"}
	zoneA, zoneB := map[string]string{zone: "a"}, map[string]string{zone: "b"}
	three := nodes(mkNode("a1", zoneA), mkNode("a2", zoneA), mkNode("b1", zoneB))
	affinityMiss := want{InterPodAffinity, []string{"node(s) didn't match pod affinity rules"}, "no pod matching"}
	anti := want{InterPodAffinity, []string{"node(s) didn't match pod anti-affinity rules"}, ""}
	existingAnti := want{InterPodAffinity, []string{"node(s) didn't satisfy existing pods anti-affinity rules"}, "repels it"}
	runCases(t, []filterCase{
		{name: "affinity satisfied in the zone of a matching pod", nodes: three, pods: pods(mkPod("db", db, on("a1"))),
			pod: mkPod("p", nil, podAffinity(term(zone, db))), fits: []string{"a1", "a2"},
			rejected: map[string]want{"b1": affinityMiss}},
		{name: "affinity not satisfied: only another namespace has a match", nodes: three,
			pods:     pods(mkPod("db", db, on("a1"), inNamespace("other"))),
			pod:      mkPod("p", nil, podAffinity(term(zone, db))),
			rejected: map[string]want{"a1": affinityMiss, "a2": affinityMiss, "b1": affinityMiss}},
		{name: "affinity through namespaceSelector", nodes: three,
			pods:       pods(mkPod("db", db, on("b1"), inNamespace("other"))),
			namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"team": "x"}}}},
			pod: mkPod("p", nil, podAffinity(func() corev1.PodAffinityTerm {
				t := term(zone, db)
				t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}
				return t
			}())), fits: []string{"b1"}, rejected: map[string]want{"a1": affinityMiss, "a2": affinityMiss}},
		{name: "self-matching first pod goes anywhere with the key", nodes: nodes(mkNode("a1", zoneA), mkNode("nozone", nil)),
			pod: mkPod("p", db, podAffinity(term(zone, db))), fits: []string{"a1"},
			rejected: map[string]want{"nozone": {InterPodAffinity, []string{"node(s) didn't match pod affinity rules"}, "lacks topology label"}}},
		{name: "non-self-matching first pod fits nowhere", nodes: nodes(mkNode("a1", zoneA)),
			pod: mkPod("p", nil, podAffinity(term(zone, db))), rejected: map[string]want{"a1": affinityMiss}},
		{name: "anti-affinity keeps the pod out of the zone", nodes: three, pods: pods(mkPod("db", db, on("a2"))),
			pod: mkPod("p", nil, podAntiAffinity(term(zone, db))), fits: []string{"b1"},
			rejected: map[string]want{"a1": anti, "a2": anti}},
		{name: "existing pod's anti-affinity repels the incoming pod", nodes: three,
			pods: pods(mkPod("lonely", nil, on("b1"), podAntiAffinity(term(corev1.LabelHostname, db)))),
			pod:  mkPod("p", db), fits: []string{"a1", "a2"}, rejected: map[string]want{"b1": existingAnti}},
		{name: "existing pod's anti-affinity in another namespace does not apply", nodes: three,
			pods: pods(mkPod("lonely", nil, on("b1"), inNamespace("other"), podAntiAffinity(term(corev1.LabelHostname, db)))),
			pod:  mkPod("p", db), fits: []string{"a1", "a2", "b1"}},
		{name: "matchLabelKeys in anti-affinity limits it to the pod's own value", nodes: three,
			pods: pods(mkPod("v1", map[string]string{"app": "db", "rev": "1"}, on("a1"))),
			pod: mkPod("p", map[string]string{"app": "db", "rev": "2"}, podAntiAffinity(func() corev1.PodAffinityTerm {
				t := term(zone, db)
				t.MatchLabelKeys = []string{"rev"}
				return t
			}())), fits: []string{"a1", "a2", "b1"}},
		{name: "existing pod's anti-affinity through namespaceSelector", nodes: three,
			namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "vms", Labels: map[string]string{"kind": "vm"}}}},
			pods: pods(mkPod("lonely", nil, on("a1"), inNamespace("other"), podAntiAffinity(func() corev1.PodAffinityTerm {
				t := term(zone, db)
				t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kind": "vm"}}
				return t
			}()))),
			pod: mkPod("p", db), fits: []string{"b1"}, rejected: map[string]want{"a1": existingAnti, "a2": existingAnti}},
		{name: "pod affinity is checked after topology spread", nodes: nodes(mkNode("nozone", nil)),
			pod:      mkPod("p", db, podAffinity(term(zone, db)), spread(zone, 1, db)),
			rejected: map[string]want{"nozone": {PodTopologySpread, []string{"node(s) didn't match pod topology spread constraints (missing required label)"}, ""}}},
	})
}

func TestPodTopologySpread(t *testing.T) {
	web := map[string]string{"app": "web"}
	zoneA, zoneB := map[string]string{zone: "a"}, map[string]string{zone: "b"}
	violated := want{PodTopologySpread, []string{"node(s) didn't match pod topology spread constraints"}, "maxSkew 1"}
	runCases(t, []filterCase{
		{name: "maxSkew satisfied everywhere", nodes: nodes(mkNode("a1", zoneA), mkNode("b1", zoneB)),
			pods: pods(mkPod("w1", web, on("a1"))), pod: mkPod("p", web, spread(zone, 2, web)), fits: []string{"a1", "b1"}},
		{name: "maxSkew violated in the fuller zone", nodes: nodes(mkNode("a1", zoneA), mkNode("b1", zoneB)),
			pods: pods(mkPod("w1", web, on("a1"))), pod: mkPod("p", web, spread(zone, 1, web)), fits: []string{"b1"},
			rejected: map[string]want{"a1": violated}},
		{name: "node without the topology key", nodes: nodes(mkNode("a1", zoneA), mkNode("nozone", nil)),
			pod: mkPod("p", web, spread(zone, 1, web)), fits: []string{"a1"},
			rejected: map[string]want{"nozone": {PodTopologySpread, []string{"node(s) didn't match pod topology spread constraints (missing required label)"}, "lacks topology label"}}},
		{name: "minDomains above the domain count makes the minimum 0", nodes: nodes(mkNode("a1", zoneA), mkNode("b1", zoneB)),
			pods:     pods(mkPod("w1", web, on("a1")), mkPod("w2", web, on("b1"))),
			pod:      mkPod("p", web, spread(zone, 1, web, func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr.To[int32](3) })),
			rejected: map[string]want{"a1": violated, "b1": violated}},
		{name: "nodes outside the pod's node affinity make no domain (Honor)",
			nodes: nodes(mkNode("a1", map[string]string{zone: "a", "pool": "vm"}), mkNode("b1", map[string]string{zone: "b"})),
			pods:  pods(mkPod("w1", web, on("a1"))),
			pod:   mkPod("p", web, spread(zone, 1, web), nodeSelector("pool", "vm")), fits: []string{"a1"},
			rejected: map[string]want{"b1": {NodeAffinity, []string{"node(s) didn't match Pod's node affinity/selector"}, ""}}},
		{name: "tainted nodes still make a domain (taints Ignore)",
			nodes: nodes(mkNode("a1", zoneA), mkNode("b1", zoneB, withTaint("t", "", corev1.TaintEffectNoSchedule))),
			pods:  pods(mkPod("w1", web, on("a1"))),
			pod:   mkPod("p", web, spread(zone, 1, web)),
			rejected: map[string]want{"a1": violated,
				"b1": {TaintToleration, []string{"node(s) had untolerated taint(s)"}, ""}}},
		{name: "matchLabelKeys narrows the count to the pod's own revision", nodes: nodes(mkNode("a1", zoneA), mkNode("b1", zoneB)),
			pods: pods(mkPod("old", map[string]string{"app": "web", "rev": "1"}, on("a1"))),
			pod: mkPod("p", map[string]string{"app": "web", "rev": "2"},
				spread(zone, 1, web, func(c *corev1.TopologySpreadConstraint) { c.MatchLabelKeys = []string{"rev"} })),
			fits: []string{"a1", "b1"}},
		{name: "pods being deleted are not counted", nodes: nodes(mkNode("a1", zoneA), mkNode("b1", zoneB)),
			pods: pods(mkPod("w1", web, on("a1"), func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })),
			pod:  mkPod("p", web, spread(zone, 1, web)), fits: []string{"a1", "b1"}},
	})
}

func TestAssumeMakesSecondIdenticalPodNotFit(t *testing.T) {
	s := NewSnapshot(nodes(mkNode("a", nil)), nil, nil, nil)
	vm := mkPod("target", nil, requests("cpu", "3", "memory", "6Gi"))
	if res := s.Evaluate(&vm); !reflect.DeepEqual(res.Fits, []string{"a"}) {
		t.Fatalf("first: %+v", res)
	}
	s.Assume(&vm, "a")
	res := s.Evaluate(&vm)
	checkResult(t, res, nil, map[string]want{"a": {NodeResourcesFit, []string{"Insufficient cpu", "Insufficient memory"}, ""}})
	if vm.Spec.NodeName != "" {
		t.Errorf("Assume modified the pod")
	}
}

func TestAssumeCountsAntiAffinityAndSpread(t *testing.T) {
	web := map[string]string{"app": "web"}
	s := NewSnapshot(nodes(mkNode("a", nil), mkNode("b", nil)), nil, nil, nil)
	p := mkPod("p", web, podAntiAffinity(term(corev1.LabelHostname, web)))
	s.Assume(&p, "a")
	checkResult(t, s.Evaluate(&p), []string{"b"}, map[string]want{"a": {InterPodAffinity, []string{"node(s) didn't match pod anti-affinity rules"}, ""}})
	other := mkPod("q", web)
	checkResult(t, s.Evaluate(&other), []string{"b"}, map[string]want{"a": {InterPodAffinity, []string{"node(s) didn't satisfy existing pods anti-affinity rules"}, ""}})
}

func TestAssumeMergesMatchLabelKeys(t *testing.T) {
	s := NewSnapshot(nodes(mkNode("a", nil), mkNode("b", nil)), nil, nil, nil)
	vm := func(rev string) corev1.Pod {
		tm := term(corev1.LabelHostname, map[string]string{"app": "web"})
		tm.MatchLabelKeys = []string{"rev"}
		return mkPod("p"+rev, map[string]string{"app": "web", "rev": rev}, podAntiAffinity(tm))
	}
	first := vm("1")
	s.Assume(&first, "a")
	sameRev, otherRev := vm("1"), vm("2")
	existing := want{InterPodAffinity, []string{"node(s) didn't match pod anti-affinity rules"}, ""}
	checkResult(t, s.Evaluate(&sameRev), []string{"b"}, map[string]want{"a": existing})
	checkResult(t, s.Evaluate(&otherRev), []string{"a", "b"}, nil)
}

func TestUnknownNodesAreUnverified(t *testing.T) {
	s := NewSnapshot(nodes(mkNode("a", nil), mkNode("b", nil, cordoned)), nil, nil, func(string) bool { return false })
	p := mkPod("p", nil, requests("cpu", "100"))
	res := s.Evaluate(&p)
	checkResult(t, res, []string{"a"}, map[string]want{"b": {NodeUnschedulable, []string{"node(s) were unschedulable"}, ""}})
	wantU := map[string][]Plugin{"a": {NodeResourcesFit, PodTopologySpread, InterPodAffinity}}
	if !reflect.DeepEqual(res.Unverified, wantU) {
		t.Errorf("unverified = %v, want %v", res.Unverified, wantU)
	}
}

func TestSchedulerMessage(t *testing.T) {
	r := func(node string, reasons ...string) Rejection { return Rejection{Node: node, Reasons: reasons} }
	cases := []struct {
		name string
		res  Result
		want string
	}{
		{"something fits", Result{Fits: []string{"a"}, Rejected: []Rejection{r("b", "x")}}, ""},
		{"counts sorted as strings", Result{Rejected: []Rejection{
			r("a", "node(s) were unschedulable"),
			r("b", "Insufficient cpu", "Insufficient memory"),
			r("c", "Insufficient memory"),
			r("d", "node(s) had untolerated taint(s)"),
		}}, "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, 2 Insufficient memory."},
		{"10 sorts before 2", Result{Rejected: append(repeat(r("n", "x"), 10), r("m", "y"), r("o", "y"))},
			"0/12 nodes are available: 10 x, 2 y."},
		{"no nodes", Result{}, "0/0 nodes are available:"},
	}
	for _, tc := range cases {
		if got := tc.res.SchedulerMessage(); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func repeat(r Rejection, n int) []Rejection {
	out := make([]Rejection, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestEvaluateSortsAndRejectsEveryNodeOnce(t *testing.T) {
	s := NewSnapshot(nodes(mkNode("c", nil, cordoned), mkNode("a", nil), mkNode("b", nil, cordoned)), nil, nil, nil)
	p := mkPod("p", nil)
	res := s.Evaluate(&p)
	if len(res.Rejected) != 2 || res.Rejected[0].Node != "b" || res.Rejected[1].Node != "c" {
		t.Errorf("rejected not sorted: %+v", res.Rejected)
	}
	if got, want := res.SchedulerMessage(), ""; got != want {
		t.Errorf("message %q", got)
	}
}
