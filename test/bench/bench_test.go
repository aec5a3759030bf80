package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	// drainNode is the node both tools drain, replicas the pods on it: the
	// kubelet's default maximum, one Deployment, as issue 5 specifies.
	drainNode = "node-1"
	replicas  = 110
	// workNamespace holds the Deployment; agentNamespace the drain slot
	// Leases and the coordinator's election (slots.namespace).
	workNamespace  = "bench"
	app            = "web"
	agentNamespace = "node-agent"
	// coordinatorIdentity names the drain slot coordinator, whose requests
	// count as node-agent's (its user agent, isCoordinator).
	coordinatorIdentity = "bench-coordinator"

	// minRounds is how many drains per tool the comparison needs; `make
	// bench` runs that many (-benchtime 3x), one node-agent and one kubectl
	// drain per iteration.
	minRounds = 3
	// roundTimeout bounds one drain. kubectl needs about 25 s for 110 pods
	// on an idle machine; a drain still running after this is a failure.
	roundTimeout = 5 * time.Minute
	// settle is how long the control plane is left alone before a drain and
	// after one, before its requests are counted: the aftermath of one step
	// (status updates, replacement pods, Events) stays out of the next
	// step's window, and a tool's last requests (node-agent's Event) are in
	// its own.
	settle = 2 * time.Second
	// waitTimeout bounds each wait of the reset between drains.
	waitTimeout = 3 * time.Minute

	toolNodeAgent = "node-agent"
	toolKubectl   = "kubectl"
)

// timeline prints, after each drain, the requests of the tool and the fake
// kubelet's pod deletions in time order, grouped, to show where the time
// goes: go test ./test/bench -run '^$' -bench . -benchtime 3x -v -timeline
var timeline = flag.Bool("timeline", false, "print each drain's requests in time order")

// targetNodes receive the drained pods; each has room for all of them.
var targetNodes = []string{"node-2", "node-3"}

// sample is one drain by one tool.
type sample struct {
	round int
	tool  string
	// wall is the time from starting the tool's command until it exited
	// reporting the drain complete.
	wall time.Duration
	// engine is node-agent's own measure of the drain
	// (node_agent_drain_duration_seconds): from the start of the eviction
	// phase, after cordoning, until the last pod was gone.
	engine time.Duration
	// requests counts the tool's API requests received in the round's
	// window; for node-agent, the agent's, the CLI's and the coordinator's
	// together.
	requests      int
	agentRequests int
	cliRequests   int
	coordRequests int
	kinds         map[string]int
	phases        phases
	// events are the tool's requests and kwok's pod deletions, for
	// -timeline.
	events []testenv.AuditEvent
	start  time.Time
}

// phases are offsets from the start of the tool's command, read from the
// audit log; zero when not seen.
type phases struct {
	firstRequest  time.Duration
	firstEviction time.Duration
	lastEviction  time.Duration
	lastPodGone   time.Duration
	evictions     int
	podsGone      int
}

// BenchmarkDrain compares node-agent's self-drain with kubectl drain on the
// same node, the same pods and the same control plane, alternating the two.
// Each iteration resets the cluster, drains node-1 with node-agent, resets
// again and drains it with kubectl. Run it with -benchtime 3x (or more) for
// at least three drains per tool, as `make bench` does.
//
// What is measured:
//   - node-agent: the wall time of `node-agent maintenance start node-1
//     --reason R --wait`, from starting the command until it exits after
//     seeing phase Succeeded in the Node's status annotation. The agent
//     (`node-agent run` for node-1) is already running, as it would be as a
//     DaemonSet; its start-up is not counted.
//   - kubectl: the wall time of `kubectl drain node-1 --ignore-daemonsets
//     --delete-emptydir-data --force`.
//
// Both finish only once every evicted pod is deleted. API requests are counted
// in the kube-apiserver audit log (stage RequestReceived, by user agent) from
// the start of the command until settle after it finished and, for
// node-agent, after the agent released its drain slot and the coordinator
// took it back. node-agent-coordinator runs beside the agent, as in a
// cluster: without it no maintenance drain starts.
func BenchmarkDrain(b *testing.B) {
	opts := testenv.DefaultOptions() // kwok pod/fast stages
	// The harness's progress lines would bury the results; a component that
	// fails is still reported, with its log, by StartForTest.
	opts.Logger = slog.New(slog.DiscardHandler)
	testenv.RequireBinaries(b, opts, testenv.BinKubectl)
	dir := b.TempDir()
	auditArgs, auditPath, err := testenv.AuditLog(dir, auditPolicy)
	if err != nil {
		b.Fatal(err)
	}
	audit := testenv.NewAuditReader(auditPath, testenv.AuditStageRequestReceived)
	opts.APIServerArgs = append(opts.APIServerArgs, auditArgs...)
	agentBin := agentBinary(b)

	loadBefore := loadAverage()
	env := testenv.StartForTest(b, opts)
	b.Logf("control plane ready at %s (kube-apiserver audit log %s)", env.Server(), auditPath)
	bd := newBed(b, env, audit, agentBin, dir)

	var samples []sample
	round := 0
	for b.Loop() {
		round++
		bd.reset()
		samples = append(samples, bd.drainWithNodeAgent(round))
		bd.reset()
		samples = append(samples, bd.drainWithKubectl(round))
	}
	if round < minRounds {
		b.Logf("only %d drains per tool; run with -benchtime %dx or more (as `make bench` does) for a meaningful median", round, minRounds)
	}
	report(b, samples, loadBefore, loadAverage())
	// The agent has lived through every drain above; its high-water mark
	// is the footprint table's "peak RSS during a drain of 110 pods".
	b.Logf("node-agent peak RSS over this run (VmHWM, %d drains of %d pods included): %s",
		round, replicas, mibString(procStatus(bd.agent.Cmd.Process.Pid, "VmHWM")))
}

// agentBinary returns $NODE_AGENT_BINARY, or node-agent built from this tree
// (testenv.AgentBinary), so the benchmark never measures a stale binary by
// accident.
func agentBinary(b *testing.B) string {
	b.Helper()
	p, err := testenv.AgentBinary()
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv(testenv.AgentBinaryEnv) != "" {
		b.Logf("measuring %s ($%s)", p, testenv.AgentBinaryEnv)
	} else {
		b.Logf("measuring node-agent built from this tree (set $%s to measure another binary)", testenv.AgentBinaryEnv)
	}
	return p
}

// bed is the control plane with node-1, its target nodes, the Deployment and
// the agent for node-1.
type bed struct {
	b        *testing.B
	ctx      context.Context
	env      *testenv.Env
	c        kubernetes.Interface
	audit    *testenv.AuditReader
	agentBin string
	agent    *agentProcess
	// coordinator grants node-agent its drain slot.
	coordinator *testenv.Coordinator
	kubectl     string
	// kubectlCache is kubectl's discovery cache (--cache-dir), kept across
	// its drains as on an admin's machine.
	kubectlCache string
}

func newBed(b *testing.B, env *testenv.Env, audit *testenv.AuditReader, agentBin, dir string) *bed {
	b.Helper()
	bd := &bed{b: b, ctx: b.Context(), env: env, c: env.Client(), audit: audit, agentBin: agentBin,
		kubectl: filepath.Join(binDir(b), testenv.BinKubectl), kubectlCache: filepath.Join(dir, "kubectl-cache")}
	if _, err := env.CreateNamespace(bd.ctx, workNamespace); err != nil {
		b.Fatal(err)
	}
	if err := env.AddNodes(bd.ctx, append([]string{drainNode}, targetNodes...)); err != nil {
		b.Fatal(err)
	}
	// The agent runs as shipped: deploy/ installed, with a token bound to
	// its DaemonSet pod on node-1 (kwok runs that pod), so its rights are
	// deploy/'s and the admission policy holds it to its own Node.
	env.InstallDeploy(b)
	agentKubeconfig := env.AgentKubeconfig(b, drainNode, dir)
	if _, err := bd.c.AppsV1().Deployments(workNamespace).Create(bd.ctx, deployment(), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// No maintenance drain starts without a drain slot, and only the
	// coordinator grants them: it runs as it would in the cluster, beside
	// the agent, with the agent's (default) drain settings.
	coordCfg, err := testenv.CoordinatorConfig(nil)
	if err != nil {
		b.Fatal(err)
	}
	bd.coordinator = testenv.StartCoordinator(b, testenv.CoordinatorOptions{
		Binary: testenv.CoordinatorBinary(agentBin), Kubeconfig: env.KubeconfigPath(), Config: coordCfg,
		Identity: coordinatorIdentity, LogLevel: "info",
	})
	bd.coordinator.WaitReady(b)
	bd.coordinator.WaitLeading(b, time.Minute)
	bd.agent = startAgentAs(b, agentKubeconfig, agentBin, drainNode, "")
	bd.agent.WaitReady(b)
	// Fill kubectl's discovery cache once, outside any measured window, so
	// every kubectl drain runs as it would on a machine that used kubectl
	// before.
	if out, err := exec.CommandContext(bd.ctx, bd.kubectl, bd.kubectlArgs("get", "nodes")...).CombinedOutput(); err != nil {
		b.Fatalf("kubectl get nodes: %v\n%s", err, out)
	}
	return bd
}

// binDir is where testenv finds the control-plane binaries, kubectl among
// them.
func binDir(b *testing.B) string {
	d, err := testenv.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func (bd *bed) kubectlArgs(args ...string) []string {
	return append([]string{"--kubeconfig", bd.env.KubeconfigPath(), "--cache-dir", bd.kubectlCache}, args...)
}

// deployment is the drained workload: replicas pods that prefer node-1 and
// tolerate only kwok's taint (a pod tolerating every taint would return to
// the cordoned node). It starts at zero; reset scales it.
func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: workNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
				Spec: corev1.PodSpec{
					Containers:  []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
					Tolerations: []corev1.Toleration{testenv.KwokToleration()},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
							Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
								Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{drainNode},
							}}},
						}},
					}},
				},
			},
		},
	}
}

// reset brings the cluster to the state every drain starts from: node-1
// schedulable, untainted, not in maintenance and running all replicas
// pods; the target nodes schedulable and empty; the agent idle.
func (bd *bed) reset() {
	b := bd.b
	b.Helper()
	node := bd.node(drainNode)
	if node.Annotations[selfdrain.MaintenanceAnnotation] != "" {
		if _, err := maintenance.EndMaintenance(bd.ctx, kubetest.Wrap(bd.c), drainNode); err != nil {
			b.Fatal(err)
		}
	}
	bd.waitFor("the agent to end maintenance on "+drainNode, func() (bool, error) {
		st, err := selfdrain.ParseStatus(bd.node(drainNode))
		return err == nil && !st.Active(), err
	})
	// kubectl drain leaves the node cordoned; uncordoning is the admin's
	// next step. The agent uncordons by itself when maintenance ends.
	bd.setUnschedulable(drainNode, false)
	if testenv.HasTaint(bd.node(drainNode), testenv.DrainTaint) {
		b.Fatalf("%s still carries the drain taint after maintenance ended", drainNode)
	}

	// The targets are cordoned while the Deployment scales up, so every pod
	// lands on node-1 whatever the scheduler's spreading scores say.
	for _, n := range targetNodes {
		bd.setUnschedulable(n, true)
	}
	bd.scale(0)
	bd.waitFor("the Deployment's pods to be gone", func() (bool, error) {
		pods, err := bd.appPods()
		return len(pods) == 0, err
	})
	bd.scale(replicas)
	bd.waitFor(fmt.Sprintf("%d pods Running on %s", replicas, drainNode), func() (bool, error) {
		pods, err := bd.appPods()
		if err != nil || len(pods) != replicas {
			return false, err
		}
		for _, p := range pods {
			if p.Spec.NodeName != drainNode || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		d, err := bd.c.AppsV1().Deployments(workNamespace).Get(bd.ctx, app, metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == replicas, err
	})
	for _, n := range targetNodes {
		bd.setUnschedulable(n, false)
	}
	// The node lifecycle controller removes the unschedulable taint a moment
	// after the uncordon; until then no replacement pod could land there.
	bd.waitFor("the target nodes to lose the unschedulable taint", func() (bool, error) {
		for _, n := range targetNodes {
			if testenv.HasTaint(bd.node(n), corev1.Taint{Key: corev1.TaintNodeUnschedulable}) {
				return false, nil
			}
		}
		return true, nil
	})
	bd.waitFor("the agent to release its drain slot", bd.slotFree)
	time.Sleep(settle)
}

func (bd *bed) drainWithNodeAgent(round int) sample {
	b := bd.b
	b.Helper()
	before := bd.agent.drainSeconds(b)
	cmd := exec.CommandContext(bd.ctx, bd.agentBin, "maintenance", "start", drainNode,
		"--reason", fmt.Sprintf("bench round %d", round), "--wait", "--timeout", roundTimeout.String(),
		"--kubeconfig", bd.env.KubeconfigPath())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		b.Fatalf("round %d: node-agent maintenance start --wait: %v\n%s\nnode-agent log:\n%s", round, err, out.String(), bd.agent.Tail(40))
	}
	st, err := selfdrain.ParseStatus(bd.node(drainNode))
	if err != nil || st == nil || st.Phase != selfdrain.PhaseSucceeded || st.EvictionPods != replicas {
		b.Fatalf("round %d: status after node-agent's drain: %v, %v; want phase Succeeded with %d pods evicted", round, st.Encode(), err, replicas)
	}
	bd.checkDrained(round, toolNodeAgent)
	// The CLI exits on the Succeeded status; the agent then sets the
	// condition, records an Event and releases its drain slot. Those
	// requests belong to this drain.
	bd.waitFor("the agent to release its drain slot", bd.slotFree)
	time.Sleep(settle)
	s := bd.sample(round, toolNodeAgent, start, wall, isNodeAgent)
	s.engine = time.Duration((bd.agent.drainSeconds(b) - before) * float64(time.Second))
	b.Logf("round %d: node-agent drained %s in %s (%d API requests); %s", round, drainNode, wall.Round(time.Millisecond), s.requests, lastLine(out.String()))
	s.logTimeline(b)
	return s
}

func (bd *bed) drainWithKubectl(round int) sample {
	b := bd.b
	b.Helper()
	cmd := exec.CommandContext(bd.ctx, bd.kubectl, bd.kubectlArgs("drain", drainNode,
		"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout", roundTimeout.String())...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		b.Fatalf("round %d: kubectl drain: %v\n%s", round, err, out.String())
	}
	bd.checkDrained(round, toolKubectl)
	time.Sleep(settle)
	s := bd.sample(round, toolKubectl, start, wall, isKubectl)
	b.Logf("round %d: kubectl drained %s in %s (%d API requests); %s", round, drainNode, wall.Round(time.Millisecond), s.requests, lastLine(out.String()))
	s.logTimeline(b)
	return s
}

// checkDrained fails the benchmark unless node-1 has no pods left but
// DaemonSet pods (both tools leave those: node-agent's own among them) and
// is cordoned: a drain that reports success without that is a functional
// error.
func (bd *bed) checkDrained(round int, tool string) {
	pods, err := bd.c.CoreV1().Pods("").List(bd.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + drainNode})
	if err != nil {
		bd.b.Fatal(err)
	}
	var left []corev1.Pod
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "DaemonSet" {
			left = append(left, p)
		}
	}
	if n := len(left); n != 0 {
		bd.b.Fatalf("round %d: %s reported %s drained, but %d pods are still on it, for example %s/%s",
			round, tool, drainNode, n, left[0].Namespace, left[0].Name)
	}
	if !bd.node(drainNode).Spec.Unschedulable {
		bd.b.Fatalf("round %d: %s reported %s drained, but it is not cordoned", round, tool, drainNode)
	}
}

// sample reads the audit log for the window from start until now and counts
// the requests whose user agent mine accepts.
func (bd *bed) sample(round int, tool string, start time.Time, wall time.Duration, mine func(string) bool) sample {
	if err := bd.audit.Read(); err != nil {
		bd.b.Fatal(err)
	}
	events := bd.audit.Between(start, time.Now())
	s := sample{round: round, tool: tool, wall: wall, kinds: map[string]int{}, start: start}
	since := func(ev testenv.AuditEvent) time.Duration { return ev.Received.Sub(start) }
	gone := map[string]bool{}
	for _, ev := range events {
		// kwok may delete a pod more than once (the later calls find it
		// gone); its first deletion is when the pod disappeared.
		if isPodGone(ev, workNamespace) && !gone[ev.ObjectRef.Name] {
			gone[ev.ObjectRef.Name] = true
			s.phases.podsGone++
			s.phases.lastPodGone = since(ev)
			s.events = append(s.events, ev)
		}
		if !mine(ev.UserAgent) {
			continue
		}
		s.events = append(s.events, ev)
		s.requests++
		switch {
		case isAgent(ev.UserAgent):
			s.agentRequests++
		case isCLI(ev.UserAgent):
			s.cliRequests++
		case isCoordinator(ev.UserAgent):
			s.coordRequests++
		}
		s.kinds[requestKind(ev)]++
		if s.requests == 1 {
			s.phases.firstRequest = since(ev)
		}
		if isEviction(ev) {
			if s.phases.evictions == 0 {
				s.phases.firstEviction = since(ev)
			}
			s.phases.evictions++
			s.phases.lastEviction = since(ev)
		}
	}
	return s
}

// logTimeline prints the drain's requests with -timeline: runs of the same
// request by the same client are one line, with the first and last time.
func (s sample) logTimeline(b *testing.B) {
	if !*timeline {
		return
	}
	var buf strings.Builder
	fmt.Fprintf(&buf, "timeline of round %d, %s (from the command's start; exit at +%s):\n", s.round, s.tool, secs(s.wall))
	who := func(ev testenv.AuditEvent) string {
		switch {
		case isAgent(ev.UserAgent):
			return "agent"
		case isCLI(ev.UserAgent):
			return "CLI"
		case isCoordinator(ev.UserAgent):
			return "coordinator"
		case isKubectl(ev.UserAgent):
			return "kubectl"
		}
		return "kwok"
	}
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	for i := 0; i < len(s.events); {
		j := i
		for j+1 < len(s.events) && who(s.events[j+1]) == who(s.events[i]) && requestKind(s.events[j+1]) == requestKind(s.events[i]) {
			j++
		}
		first, last := s.events[i].Received.Sub(s.start), s.events[j].Received.Sub(s.start)
		span := "+" + secs(first)
		if j > i {
			span += " .. +" + secs(last)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\tx%d\t%s\n", span, who(s.events[i]), requestKind(s.events[i]), j-i+1, writer(s.events[i]))
		i = j + 1
	}
	_ = tw.Flush()
	b.Log(buf.String())
}

// writer names, for the timeline, what a request is for: the field manager,
// dry run, selectors and streaming list its request URI gives, if any.
func writer(ev testenv.AuditEvent) string {
	u, err := url.ParseRequestURI(ev.RequestURI)
	if err != nil {
		return ""
	}
	var parts []string
	if m := u.Query().Get("fieldManager"); m != "" {
		parts = append(parts, m)
	}
	if u.Query().Get("dryRun") != "" {
		parts = append(parts, "dry run")
	}
	for _, k := range []string{"fieldSelector", "labelSelector", "sendInitialEvents"} {
		if v := u.Query().Get(k); v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}

func (bd *bed) node(name string) *corev1.Node {
	n, err := bd.c.CoreV1().Nodes().Get(bd.ctx, name, metav1.GetOptions{})
	if err != nil {
		bd.b.Fatal(err)
	}
	return n
}

func (bd *bed) setUnschedulable(name string, on bool) {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := bd.c.CoreV1().Nodes().Patch(bd.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		bd.b.Fatal(err)
	}
}

func (bd *bed) scale(n int32) {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	if _, err := bd.c.AppsV1().Deployments(workNamespace).Patch(bd.ctx, app, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		bd.b.Fatal(err)
	}
}

func (bd *bed) appPods() ([]corev1.Pod, error) {
	l, err := bd.c.CoreV1().Pods(workNamespace).List(bd.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// slotFree reports whether the drain slot of the last drain is given back
// all the way: the agent withdrew its request, and the coordinator removed
// its answer from the Node and deleted the slot Lease. Every request of the
// drain has then been made.
func (bd *bed) slotFree() (bool, error) {
	node := bd.node(drainNode)
	if _, ok := node.Annotations[slots.RequestAnnotation]; ok {
		return false, nil
	}
	if _, ok := node.Annotations[slots.GrantAnnotation]; ok {
		return false, nil
	}
	_, err := bd.c.CoordinationV1().Leases(agentNamespace).Get(bd.ctx, slots.LeaseName(drainNode), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

func (bd *bed) waitFor(what string, cond func() (bool, error)) {
	bd.b.Helper()
	ctx, cancel := context.WithTimeout(bd.ctx, waitTimeout)
	defer cancel()
	if err := testenv.Poll(ctx, 200*time.Millisecond, what, cond); err != nil {
		bd.b.Fatalf("%v\nnode-agent log:\n%s\nnode-agent-coordinator log:\n%s", err, bd.agent.Tail(20), bd.coordinator.Tail(20))
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// loadAverage returns /proc/loadavg's one-minute figure, so the report says
// how busy the machine was.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// report prints the per-round figures, the medians and their ratio, and the
// requests by kind, and reports the medians as benchmark metrics.
func report(b *testing.B, samples []sample, loadBefore, loadAfter string) {
	byTool := map[string][]sample{}
	for _, s := range samples {
		byTool[s.tool] = append(byTool[s.tool], s)
	}
	na, kc := byTool[toolNodeAgent], byTool[toolKubectl]
	if len(na) == 0 || len(kc) == 0 {
		return
	}
	naWall, kcWall := medianOf(na, wallSeconds), medianOf(kc, wallSeconds)
	naReq, kcReq := medianOf(na, requestCount), medianOf(kc, requestCount)

	var buf strings.Builder
	fmt.Fprintf(&buf, "\nDrain of %d pods (one Deployment, kwok pod/fast stages) from %s to %d empty nodes, %d rounds per tool, alternating.\n",
		replicas, drainNode, len(targetNodes), len(na))
	fmt.Fprintf(&buf, "Load average (1 min) before: %s, after: %s, on %d CPUs; other work on the machine adds noise.\n\n", loadBefore, loadAfter, runtime.NumCPU())

	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUND\tTOOL\tWALL\tREQUESTS\tEVICTIONS\t1ST REQUEST\t1ST EVICTION\tLAST EVICTION\tLAST POD GONE\tENGINE")
	for _, s := range samples {
		reqs := fmt.Sprint(s.requests)
		engine := "-"
		if s.tool == toolNodeAgent {
			reqs = fmt.Sprintf("%d (agent %d, CLI %d, coordinator %d)", s.requests, s.agentRequests, s.cliRequests, s.coordRequests)
			engine = secs(s.engine)
		}
		p := s.phases
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t+%s\t+%s\t+%s\t+%s (%d)\t%s\n", s.round, s.tool, secs(s.wall), reqs, p.evictions,
			secs(p.firstRequest), secs(p.firstEviction), secs(p.lastEviction), secs(p.lastPodGone), p.podsGone, engine)
	}
	_ = tw.Flush()
	buf.WriteString(`
  WALL: the command's wall time. REQUESTS: API requests received from the tool in the round (audit log, stage
  RequestReceived; a watch counts once); node-agent's include node-agent-coordinator's, which grants and takes
  back the drain slot (its leader election's renewals are left out). Times marked + are from the command's
  start: its first request, its first and last eviction, and when the fake kubelet (kwok) deleted the last
  drained pod (in brackets: pods deleted).
  ENGINE: node-agent's node_agent_drain_duration_seconds (from opening its pod watch until the Succeeded status and
  condition are written; the CLI exits once it sees the status, so ENGINE can exceed WALL).

`)
	tw = tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEDIAN\tnode-agent\tkubectl\tkubectl / node-agent")
	fmt.Fprintf(tw, "wall time\t%.2fs\t%.2fs\t%.1fx\n", naWall, kcWall, kcWall/naWall)
	fmt.Fprintf(tw, "API requests\t%.0f\t%.0f\t%.1fx\n", naReq, kcReq, kcReq/naReq)
	_ = tw.Flush()
	verdict := "reached"
	if kcWall/naWall < 10 || naReq >= kcReq {
		verdict = "NOT reached"
	}
	fmt.Fprintf(&buf, "\nTarget (issue 5): node-agent at or below 1/10 of kubectl's time, with fewer requests: %s.\n", verdict)

	for _, tool := range []string{toolNodeAgent, toolKubectl} {
		fmt.Fprintf(&buf, "\nRequests of %s by kind, mean per drain:\n", tool)
		buf.WriteString(kindTable(byTool[tool]))
	}
	b.Log(buf.String())

	// ns/op would be the time of a whole iteration (both drains and their
	// resets); the medians below are what the benchmark measures.
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(naWall, "node-agent-s/drain")
	b.ReportMetric(kcWall, "kubectl-s/drain")
	b.ReportMetric(kcWall/naWall, "kubectl/node-agent")
	b.ReportMetric(naReq, "node-agent-requests/drain")
	b.ReportMetric(kcReq, "kubectl-requests/drain")
}

func kindTable(samples []sample) string {
	total := map[string]int{}
	for _, s := range samples {
		for k, n := range s.kinds {
			total[k] += n
		}
	}
	kinds := make([]string, 0, len(total))
	for k := range total {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if total[kinds[i]] != total[kinds[j]] {
			return total[kinds[i]] > total[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	for _, k := range kinds {
		fmt.Fprintf(tw, "  %s\t%.1f\n", k, float64(total[k])/float64(len(samples)))
	}
	_ = tw.Flush()
	return buf.String()
}

func wallSeconds(s sample) float64  { return s.wall.Seconds() }
func requestCount(s sample) float64 { return float64(s.requests) }

func medianOf(samples []sample, f func(sample) float64) float64 {
	vals := make([]float64, len(samples))
	for i, s := range samples {
		vals[i] = f(s)
	}
	return median(vals)
}

// median of vals; the mean of the middle two for an even count.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	v := append([]float64(nil), vals...)
	sort.Float64s(v)
	m := len(v) / 2
	if len(v)%2 == 1 {
		return v[m]
	}
	return (v[m-1] + v[m]) / 2
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
