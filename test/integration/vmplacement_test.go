package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/placement"
	"github.com/node-agent/node-agent/pkg/targetpod"
	"github.com/node-agent/node-agent/pkg/vmdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// placementCase is one VM of TestVMPlacementAgreesWithScheduler: a VMI on
// source, the rule it exercises, and the nodes its migration can go to
// (none when want is empty). Rows with the same group are planned
// together, in name order, and their target pods are kept until the
// group's last one is scheduled.
type placementCase struct {
	name, rule string
	source     string
	spec       map[string]any
	labels     map[string]string
	machine    string            // status.machine.type
	srcSel     map[string]string // the source launcher pod's node selector
	cluster    targetpod.Cluster
	group      string
	want       []string
	// node, when want is empty, is the node the case is about; plugin is
	// the filter that must reject it there.
	node   string
	plugin placement.Plugin
}

// specOpt changes a VMI spec built by vmSpec.
type specOpt func(map[string]any)

// vmSpec is a VMI spec as KubeVirt's mutating webhook leaves it: strategy
// LiveMigrate, architecture amd64, the named model EPYC-Genoa with one
// vCPU, 1Gi of guest memory, the kwok toleration; pinned to a node by a
// hostname node selector unless pin is empty.
func vmSpec(pin string, opts ...specOpt) map[string]any {
	spec := map[string]any{
		"evictionStrategy": vmdrain.StrategyLiveMigrate,
		"architecture":     "amd64",
		"domain": map[string]any{
			"cpu":       map[string]any{"model": "EPYC-Genoa", "sockets": int64(1), "cores": int64(1), "threads": int64(1)},
			"memory":    map[string]any{"guest": "1Gi"},
			"resources": map[string]any{"requests": map[string]any{"memory": "1Gi"}},
		},
		"tolerations": []any{toMap(testenv.KwokToleration())},
	}
	if pin != "" {
		spec["nodeSelector"] = map[string]any{corev1.LabelHostname: pin}
	}
	for _, o := range opts {
		o(spec)
	}
	return spec
}

// toMap is v as the JSON object the API would store.
func toMap(v any) map[string]any {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		panic(err)
	}
	return m
}

func domainField(spec map[string]any, key string) map[string]any {
	return spec["domain"].(map[string]any)[key].(map[string]any)
}

func model(m string) specOpt {
	return func(s map[string]any) { domainField(s, "cpu")["model"] = m }
}

func feature(name, policy string) specOpt {
	return func(s map[string]any) {
		cpu := domainField(s, "cpu")
		fs, _ := cpu["features"].([]any)
		cpu["features"] = append(fs, map[string]any{"name": name, "policy": policy})
	}
}

func guest(q string) specOpt {
	return func(s map[string]any) {
		domainField(s, "memory")["guest"] = q
		domainField(s, "resources")["requests"].(map[string]any)["memory"] = q
	}
}

func cpuRequest(q string) specOpt {
	return func(s map[string]any) { domainField(s, "resources")["requests"].(map[string]any)["cpu"] = q }
}

func machineSpec(t string) specOpt {
	return func(s map[string]any) { s["domain"].(map[string]any)["machine"] = map[string]any{"type": t} }
}

func selector(k, v string) specOpt {
	return func(s map[string]any) {
		sel, _ := s["nodeSelector"].(map[string]any)
		if sel == nil {
			sel = map[string]any{}
		}
		sel[k] = v
		s["nodeSelector"] = sel
	}
}

func tolerate(t corev1.Toleration) specOpt {
	return func(s map[string]any) { s["tolerations"] = append(s["tolerations"].([]any), toMap(t)) }
}

// affinity sets spec.affinity.
func affinity(a corev1.Affinity) specOpt {
	return func(s map[string]any) { s["affinity"] = toMap(a) }
}

func nodeIn(key string, values ...string) corev1.Affinity {
	return corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}},
	}}}
}

// podTerm: pods labelled app=<app>, on the same node.
func podTerm(app string) []corev1.PodAffinityTerm {
	return []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
}

// spreadByHost: at most one more pod labelled spread=s on a node than on
// the emptiest one, among the nodes named.
func spreadByHost(nodes ...string) specOpt {
	return func(s map[string]any) {
		affinity(nodeIn(corev1.LabelHostname, nodes...))(s)
		s["topologySpreadConstraints"] = []any{toMap(corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"spread": "s"}},
		})}
	}
}

func tol(key, value string) corev1.Toleration {
	op := corev1.TolerationOpEqual
	if value == "" {
		op = corev1.TolerationOpExists
	}
	return corev1.Toleration{Key: key, Operator: op, Value: value, Effect: corev1.TaintEffectNoSchedule}
}

// placementCases is the table; see placementNodes for what each node has.
func placementCases() []placementCase {
	c := func(name, rule string, spec map[string]any, want ...string) placementCase {
		return placementCase{name: name, rule: rule, source: srcAMD, spec: spec, want: want}
	}
	// n is a case with no target, whose node of interest must be rejected
	// by plugin.
	n := func(name, rule string, spec map[string]any, node string, plugin placement.Plugin) placementCase {
		pc := c(name, rule, spec)
		pc.node, pc.plugin = node, plugin
		return pc
	}
	withSource := func(pc placementCase, source string) placementCase { pc.source = source; return pc }
	withMachine := func(pc placementCase, m string) placementCase { pc.machine = m; return pc }
	withSrcSel := func(pc placementCase, sel map[string]string) placementCase { pc.srcSel = sel; return pc }
	withCluster := func(pc placementCase, cl targetpod.Cluster) placementCase { pc.cluster = cl; return pc }
	withLabels := func(pc placementCase, l map[string]string) placementCase { pc.labels = l; return pc }
	inGroup := func(pc placementCase, g string) placementCase { pc.group = g; return pc }
	milan := trueLabels(lMigration + "EPYC-Milan")
	return []placementCase{
		n("source-excluded", "row 28: never the source node (anti-affinity on kubevirt.io/created-by)", vmSpec(srcAMD), srcAMD, placement.InterPodAffinity),
		c("sched-true", "row 1: kubevirt.io/schedulable=true", vmSpec(amd1), amd1),
		n("sched-absent", "row 1: kubevirt.io/schedulable absent", vmSpec(noSched), noSched, placement.NodeAffinity),
		n("sched-false", "row 1: kubevirt.io/schedulable=false", vmSpec(schedFalse), schedFalse, placement.NodeAffinity),
		c("model-present", "row 8: named model on the node", vmSpec("", model("EPYC-Milan")), oldAMD),
		n("model-absent", "row 8: named model not on the node", vmSpec(oldAMD), oldAMD, placement.NodeAffinity),
		c("hostmodel-ok", "row 20 step 2: source's host model and required features", vmSpec(amd1, model("host-model")), amd1),
		n("hostmodel-nomodel", "row 20 step 2: host model missing", vmSpec(oldAMD, model("host-model")), oldAMD, placement.NodeAffinity),
		n("hostmodel-nofeature", "row 20 step 2: required feature missing", vmSpec(amd2, model("host-model")), amd2, placement.NodeAffinity),
		withSrcSel(c("hostmodel-srcpod-old", "row 20 step 1: source pod's selector, not the source node", vmSpec(oldAMD, model("host-model")), oldAMD), milan),
		withSrcSel(c("hostmodel-srcpod-nofeat", "row 20 step 1: the node's required features not read", vmSpec(amd2, model("host-model")), amd2), milan),
		n("feature-require", "row 9: require needs the feature label", vmSpec(amd2, feature("ibpb", "require")), amd2, placement.NodeAffinity),
		c("feature-force", "row 9: force needs no label", vmSpec(amd2, feature("ibpb", "force")), amd2),
		c("feature-optional", "row 9: optional needs no label", vmSpec(amd2, feature("ibpb", "optional")), amd2),
		n("feature-forbid-present", "row 25: forbid, label present", vmSpec(amd2, feature("avx512f", "forbid")), amd2, placement.NodeAffinity),
		c("feature-forbid-absent", "row 25: forbid, label absent", vmSpec(amd2, feature("ibpb", "forbid")), amd2),
		withMachine(c("machine-status", "row 10: status.machine.type on the node", vmSpec(amd1, machineSpec("q35")), amd1), machineNew),
		withMachine(n("machine-status-wins", "row 10: status.machine.type, not spec's", vmSpec(amd1, machineSpec(machineNew)), amd1, placement.NodeAffinity), machineOld),
		n("vendor-named-other", "row 21: named model, source AMD, node Intel", vmSpec(intel1, model("Skylake-Server")), intel1, placement.NodeAffinity),
		withSource(c("vendor-named-same", "row 21: named model, source Intel, node Intel", vmSpec(intel1, model("Skylake-Server")), intel1), srcIntel),
		n("vendor-passthrough-other", "row 21: host-passthrough, source AMD, node Intel", vmSpec(intel1, model("host-passthrough")), intel1, placement.NodeAffinity),
		c("vendor-passthrough-same", "row 21: host-passthrough, source AMD, node AMD", vmSpec(amd1, model("host-passthrough")), amd1),
		c("selector-match", "row 4: VMI nodeSelector matches", vmSpec(amd1, selector("disk", "ssd")), amd1),
		n("selector-mismatch", "row 4: VMI nodeSelector does not match", vmSpec(amd2, selector("disk", "ssd")), amd2, placement.NodeAffinity),
		c("affinity-match", "row 23: required node affinity matches", vmSpec(amd1, affinity(nodeIn("rack", "r1"))), amd1),
		n("affinity-mismatch", "row 23: required node affinity does not match", vmSpec(amd2, affinity(nodeIn("rack", "r1"))), amd2, placement.NodeAffinity),
		withCluster(c("cr-selector-match", "row 3: the CR's nodeSelectors match", vmSpec(amd1), amd1), targetpod.Cluster{NodeSelectors: map[string]string{"rack": "r1"}}),
		withCluster(n("cr-selector-mismatch", "row 3: the CR's nodeSelectors do not match", vmSpec(amd2), amd2, placement.NodeAffinity), targetpod.Cluster{NodeSelectors: map[string]string{"rack": "r1"}}),
		n("drain-taint", "row 30: kubevirt.io/drain:NoSchedule untolerated (maintenance)", vmSpec(draining), draining, placement.TaintToleration),
		c("drain-tolerated", "row 30: kubevirt.io/drain tolerated", vmSpec(draining, tolerate(tol(testenv.DrainTaint.Key, ""))), draining),
		n("taint-untolerated", "row 30: dedicated=vm:NoSchedule untolerated", vmSpec(tainted), tainted, placement.TaintToleration),
		c("taint-tolerated", "row 30: dedicated=vm:NoSchedule tolerated", vmSpec(tainted, tolerate(tol("dedicated", "vm"))), tainted),
		n("cordoned", "cordoned node", vmSpec(cordoned), cordoned, placement.NodeUnschedulable),
		c("cordon-tolerated", "cordoned node, its unschedulable taint tolerated", vmSpec(cordoned, tolerate(tol(corev1.TaintNodeUnschedulable, ""))), cordoned),
		n("antiaffinity-violated", "row 23: pod anti-affinity, app=db on the node", vmSpec(amd1, affinity(corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: podTerm("db")}})), amd1, placement.InterPodAffinity),
		c("antiaffinity-satisfied", "row 23: pod anti-affinity, no app=db on the node", vmSpec(amd2, affinity(corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: podTerm("db")}})), amd2),
		c("podaffinity-satisfied", "row 23: pod affinity, app=db on the node", vmSpec(amd1, affinity(corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: podTerm("db")}})), amd1),
		n("podaffinity-unsatisfied", "row 23: pod affinity, no app=db on the node", vmSpec(amd2, affinity(corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: podTerm("db")}})), amd2, placement.InterPodAffinity),
		withLabels(c("spread-satisfied", "row 45: topology spread, amd-2 has room in the skew", vmSpec("", spreadByHost(amd1, amd2)), amd2), map[string]string{"spread": "s"}),
		withLabels(n("spread-violated", "row 45: topology spread, the emptiest node tainted", vmSpec("", spreadByHost(amd1, tainted)), amd1, placement.PodTopologySpread), map[string]string{"spread": "s"}),
		n("memory-overhead", "rows 32-33: free memory above the guest, below guest+overhead", vmSpec(memNode), memNode, placement.NodeResourcesFit),
		c("memory-fits", "rows 32-33: guest+overhead within free memory", vmSpec(memNode, guest("512Mi")), memNode),
		n("cpu-short", "row 35: the VMI's CPU request above the node's", vmSpec(cpuNode, cpuRequest("3")), cpuNode, placement.NodeResourcesFit),
		c("cpu-fits", "row 35: the VMI's CPU request within the node's", vmSpec(cpuNode, cpuRequest("1")), cpuNode),
		inGroup(c("pair-a", "capacity: the first of two takes the only room", vmSpec("", guest("300Gi")), pairNode), "pair"),
		inGroup(n("pair-b", "capacity: the second finds no room left", vmSpec("", guest("300Gi")), pairNode, placement.NodeResourcesFit), "pair"),
		n("kvm-missing", "row 39: no devices.kubevirt.io/kvm on the node", vmSpec(noKVM), noKVM, placement.NodeResourcesFit),
		withCluster(c("kvm-emulation", "row 39: useEmulation asks no kvm", vmSpec(noKVM), noKVM), targetpod.Cluster{UseEmulation: true}),
	}
}

// TestVMPlacementAgreesWithScheduler is issue 42's acceptance: for each VM
// of placementCases, vmdrain.Plan's answer is the real kube-scheduler's.
// Its target pod, created unbound, is bound to one of the plan's targets
// when it has some; when it has none, it stays Pending with the message
// Placement.SchedulerMessage() predicts, reason counts included. A dry run
// of the source's maintenance then changes no Node.
func TestVMPlacementAgreesWithScheduler(t *testing.T) {
	cases := placementCases()
	b := newPlacementBed(t)
	var table []string
	for i := 0; i < len(cases); {
		j := i + 1
		for cases[i].group != "" && j < len(cases) && cases[j].group == cases[i].group {
			j++
		}
		table = append(table, b.runCases(t, cases[i:j])...)
		i = j
	}
	t.Logf("case | rule | expected | plan | kube-scheduler\n%s", strings.Join(table, "\n"))
	b.dryRunChangesNothing(t)
}

// runCases creates the VMs of one group, plans them together and has
// kube-scheduler place each target pod in turn, keeping the earlier ones
// until the last is placed. It returns a table row per case.
func (b *placementBed) runCases(t *testing.T, group []placementCase) []string {
	t.Helper()
	for _, pc := range group {
		b.createVM(t, pc.name, pc.source, pc.spec, pc.labels, pc.machine, pc.srcSel)
	}
	plans := b.plan(t, group)
	var rows, kept []string
	for i, pc := range group {
		p, ok := plans[vmNamespace+"/"+pc.name]
		if !ok || p.Pod == nil {
			t.Errorf("%s: no plan or no target pod: %+v", pc.name, p)
			continue
		}
		want, planned := checkPlan(t, pc, p)
		o := b.schedule(t, p.Pod, i < len(group)-1)
		if o.Node != "" && i < len(group)-1 {
			kept = append(kept, o.Pod)
		}
		agree := "agrees"
		switch {
		case len(p.Targets) > 0 && !slices.Contains(p.Targets, o.Node):
			agree = "DISAGREES"
			t.Errorf("%s (%s): plan %s, kube-scheduler: %s", pc.name, pc.rule, planned, o)
		case len(p.Targets) == 0 && (o.Node != "" || filterPart(o.Message) != strings.TrimSuffix(p.Placement.SchedulerMessage(), ".")):
			agree = "DISAGREES"
			t.Errorf("%s (%s): plan %s, kube-scheduler: %s\nplan:      %q\nscheduler: %q", pc.name, pc.rule, planned, o,
				strings.TrimSuffix(p.Placement.SchedulerMessage(), "."), filterPart(o.Message))
		}
		row := fmt.Sprintf("%s | %s | %s | %s | %s (%s)", pc.name, pc.rule, want, planned, o, agree)
		t.Log(row)
		rows = append(rows, row)
	}
	for _, name := range kept {
		b.deletePod(t, name)
	}
	return rows
}

// checkPlan checks a plan against the case's expectation (its targets; or
// none, with the case's node rejected by the case's plugin) and returns
// both as text for the table.
func checkPlan(t *testing.T, pc placementCase, p vmdrain.VMPlan) (want, planned string) {
	t.Helper()
	want = "no target"
	if len(pc.want) > 0 {
		want = strings.Join(pc.want, ",")
	}
	planned = fmt.Sprintf("%s %s", p.Way, strings.Join(p.Targets, ","))
	if len(p.Targets) == 0 {
		planned = fmt.Sprintf("%s %q", p.Way, p.Placement.SchedulerMessage())
	}
	if !slices.Equal(p.Targets, pc.want) || (len(pc.want) > 0) != (p.Way == vmdrain.Migrate) || (len(pc.want) == 0 && p.Way != vmdrain.NoTarget) {
		t.Errorf("%s (%s): plan %s, want %s", pc.name, pc.rule, planned, want)
	}
	if len(p.Placement.Unverified) > 0 {
		t.Errorf("%s: an admin's plan left checks undone: %v", pc.name, p.Placement.Unverified)
	}
	if pc.node == "" {
		return want, planned
	}
	want += fmt.Sprintf(", %s rejected by %s", pc.node, pc.plugin)
	i := slices.IndexFunc(p.Placement.Rejected, func(r placement.Rejection) bool { return r.Node == pc.node })
	if i < 0 {
		t.Errorf("%s (%s): the plan does not reject %s", pc.name, pc.rule, pc.node)
		return want, planned
	}
	r := p.Placement.Rejected[i]
	planned += fmt.Sprintf(", %s rejected by %s: %s", r.Node, r.Plugin, r.Detail)
	if r.Plugin != pc.plugin {
		t.Errorf("%s (%s): %s rejected by %s (%v), want %s", pc.name, pc.rule, r.Node, r.Plugin, r.Reasons, pc.plugin)
	}
	return want, planned
}

// plan lists the bed as an admin sees it and plans the group's VMs off
// their (common) source with the group's KubeVirt settings; the plans are
// keyed by namespace/name.
func (b *placementBed) plan(t *testing.T, group []placementCase) map[string]vmdrain.VMPlan {
	t.Helper()
	ctx := t.Context()
	nodes, err := b.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := b.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namespaces, err := b.c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	view := vmdrain.View{Nodes: nodes.Items, Pods: pods.Items, Namespaces: namespaces.Items,
		PodsKnown: func(string) bool { return true }, Cluster: group[0].cluster}
	var vms []vmdrain.VM
	for _, pc := range group {
		u, err := b.dyn.Resource(vmdrain.GVR).Namespace(vmNamespace).Get(ctx, pc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := vmdrain.FromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		if v.Object == nil {
			v.Object = u
		}
		if v.UID == "" {
			v.UID = string(u.GetUID())
		}
		vms = append(vms, v)
	}
	vmdrain.AttachLaunchers(vms, pods.Items)
	for _, v := range vms {
		if v.Launcher == nil {
			t.Errorf("%s: no launcher pod attached", v.Key())
		}
	}
	out := map[string]vmdrain.VMPlan{}
	for _, p := range vmdrain.Plan(vms, getNode(t, b.c, group[0].source), view, vmdrain.Defaults{}) {
		out[p.VM.Key()] = p
	}
	return out
}
