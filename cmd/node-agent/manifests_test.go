package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// The identity and the admission policy deploy/ gives the agent.
const (
	deployNamespace      = "node-agent"
	deployServiceAccount = "node-agent"
	deployUser           = "system:serviceaccount:" + deployNamespace + ":" + deployServiceAccount
	deployPolicy         = "node-agent-own-node"
)

var quoted = regexp.MustCompile(`'([^']*)'`)

// celStrings returns the single-quoted strings of a CEL expression.
func celStrings(expr string) []string {
	var out []string
	for _, m := range quoted.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

func policyVariable(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, name string) string {
	t.Helper()
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	t.Fatalf("policy %s has no variable %s", p.Name, name)
	return ""
}

func portOfAddress(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, _ := strings.Cut(addr, ":")
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// TestDeployManifestsAgreeWithCode checks the facts that deploy/ repeats from
// the code: the policy's label prefixes, annotation, taint and conditions,
// its ServiceAccount, and the DaemonSet's ports, mounts and config file.
func TestDeployManifestsAgreeWithCode(t *testing.T) {
	// kustomization.yaml lists exactly testenv.DeployFiles.
	var kust struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(testenv.DeployDir(t), "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &kust); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(kust.Resources)), slices.Sorted(slices.Values(testenv.DeployFiles))) {
		t.Errorf("kustomization.yaml lists %v, the tests read %v", kust.Resources, testenv.DeployFiles)
	}
	objs := testenv.ReadDeployObjects(t)
	def := config.Default()

	var ds appsv1.DaemonSet
	testenv.DeployObject(t, objs, "DaemonSet", deployNamespace, "node-agent", &ds)
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicy", "", deployPolicy, &policy)
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicyBinding", "", deployPolicy, &binding)
	var cr rbacv1.ClusterRole
	testenv.DeployObject(t, objs, "ClusterRole", "", "node-agent", &cr)

	// The policy names the DaemonSet's ServiceAccount.
	if got := ds.Namespace + "/" + ds.Spec.Template.Spec.ServiceAccountName; got != deployNamespace+"/"+deployServiceAccount {
		t.Errorf("DaemonSet runs as %s, want %s/%s", got, deployNamespace, deployServiceAccount)
	}
	wantMatchesServiceAccount(t, &policy, deployServiceAccount)
	for _, name := range []string{"node-agent-own-nodemaintenance", "node-agent-own-events"} {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		testenv.DeployObject(t, objs, "ValidatingAdmissionPolicy", "", name, &p)
		wantMatchesServiceAccount(t, &p, deployServiceAccount)
	}
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v does not Deny with policy %s", binding.Spec, policy.Name)
	}

	// The policy's list of what the agent owns is the code's.
	wantPrefixes := slices.Sorted(slices.Values(labeller.OwnedPrefixes()))
	if got := celStrings(policyVariable(t, &policy, "ownedLabelPrefixes")); !slices.Equal(got, wantPrefixes) {
		t.Errorf("policy ownedLabelPrefixes = %v, labeller.OwnedPrefixes() = %v", got, wantPrefixes)
	}
	if got, want := celStrings(policyVariable(t, &policy, "ownedLabelKeys")), slices.Sorted(slices.Values(labeller.OwnedKeys())); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("policy ownedLabelKeys = %v, labeller.OwnedKeys() = %v", got, want)
	}
	wantAnnotations := slices.Sorted(slices.Values([]string{selfdrain.StatusAnnotation, maintenance.RequestersAnnotation, reboot.RecordAnnotation, slots.RequestAnnotation}))
	if got := celStrings(policyVariable(t, &policy, "ownedAnnotations")); !slices.Equal(got, wantAnnotations) {
		t.Errorf("policy ownedAnnotations = %v, want %v", got, wantAnnotations)
	}
	// The grant is the coordinator's: the agent may not write it, and the
	// rule that says so comes before the general annotation rule, so the
	// refusal names it.
	if got := celStrings(policyVariable(t, &policy, "grantAnnotation")); !slices.Equal(got, []string{slots.GrantAnnotation}) {
		t.Errorf("policy grantAnnotation = %v, want %s", got, slots.GrantAnnotation)
	}
	grantRule, generalRule := -1, -1
	for i, v := range policy.Spec.Validations {
		if strings.Contains(v.Expression, "variables.grantAnnotation") && strings.Contains(v.Message, "granted only by node-agent-coordinator") {
			grantRule = i
		}
		if strings.Contains(v.Expression, "variables.ownedAnnotations") && generalRule < 0 {
			generalRule = i
		}
	}
	if grantRule < 0 || generalRule < 0 || grantRule > generalRule {
		t.Errorf("policy %s: the rule refusing %s (validation %d) must come before the owned-annotations rule (validation %d)", policy.Name, slots.GrantAnnotation, grantRule, generalRule)
	}
	if got := celStrings(policyVariable(t, &policy, "removableAnnotation")); !slices.Equal(got, []string{reboot.RequestAnnotation}) {
		t.Errorf("policy removableAnnotation = %v, want %s", got, reboot.RequestAnnotation)
	}
	if got := celStrings(policyVariable(t, &policy, "drainTaintKey")); !slices.Equal(got, []string{def.Drain.TaintKey}) {
		t.Errorf("policy drainTaintKey = %v, want drain.taintKey's default %s", got, def.Drain.TaintKey)
	}
	if got := celStrings(policyVariable(t, &policy, "rebootPendingTaintKey")); !slices.Equal(got, []string{reboot.PendingTaintKey}) {
		t.Errorf("policy rebootPendingTaintKey = %v, want %s", got, reboot.PendingTaintKey)
	}
	wantConds := []string{string(selfdrain.ShuttingDownCondition), string(selfdrain.ConditionType), string(reboot.ConditionType)}
	sort.Strings(wantConds)
	if got := celStrings(policyVariable(t, &policy, "agentConditions")); !slices.Equal(got, wantConds) {
		t.Errorf("policy agentConditions = %v, want %v", got, wantConds)
	}

	// Without drain.deleteAfter the agent deletes no pod, and RBAC says so.
	if def.Drain.DeleteAfter.Duration == 0 {
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "pods") && slices.Contains(r.Verbs, "delete") {
				t.Errorf("ClusterRole grants pods delete, but drain.deleteAfter is off by default")
			}
		}
	}

	// The DaemonSet serves what the config file says, and mounts what it
	// names.
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if want := portOfAddress(t, def.MetricsBindAddress); ports["metrics"] != want {
		t.Errorf("metrics port %d, metricsBindAddress %s", ports["metrics"], def.MetricsBindAddress)
	}
	if want := portOfAddress(t, def.HealthProbeBindAddress); ports["health"] != want {
		t.Errorf("health port %d, healthProbeBindAddress %s", ports["health"], def.HealthProbeBindAddress)
	}
	for name, probe := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe for %s: %+v", name, probe)
		}
	}
	if !slices.Contains(ctr.Args, "--config=/etc/node-agent/config.yaml") {
		t.Errorf("args %v do not pass --config=/etc/node-agent/config.yaml", ctr.Args)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	if v := volumes[mounts["/etc/node-agent"].Name]; v.ConfigMap == nil || v.ConfigMap.Name != "node-agent-config" || mounts["/etc/node-agent"].SubPath != "" {
		t.Errorf("/etc/node-agent is not the whole ConfigMap node-agent-config: %+v", v)
	}
	busSocket := strings.TrimPrefix(def.Shutdown.SystemBusAddress, "unix:path=")
	hostMounts := map[string]string{ // mount path: host path
		def.StateDir:                 def.StateDir,
		filepath.Dir(busSocket):      filepath.Dir(busSocket),
		def.Shutdown.LogindDropInDir: def.Shutdown.LogindDropInDir,
		"/run/host/libvirt":          "/run/libvirt",
	}
	for dir, host := range hostMounts {
		m, ok := mounts[dir]
		if !ok {
			t.Errorf("no mount at %s", dir)
			continue
		}
		if hp := volumes[m.Name].HostPath; hp == nil || hp.Path != host {
			t.Errorf("mount %s is not the host's %s: %+v", dir, host, volumes[m.Name])
		}
	}
	// The embedded QEMU driver writes into /run/libvirt: the pod's own.
	if m, ok := mounts["/run/libvirt"]; !ok || volumes[m.Name].EmptyDir == nil || m.ReadOnly {
		t.Errorf("/run/libvirt is not a writable emptyDir: %+v", volumes[m.Name])
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && !slices.Contains(slices.Collect(maps.Values(hostMounts)), v.HostPath.Path) {
			t.Errorf("host mount %s is not one the agent needs", v.HostPath.Path)
		}
	}
	if mounts[def.StateDir].ReadOnly {
		t.Errorf("stateDir %s is mounted read-only", def.StateDir)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME is not the downward API's spec.nodeName: %+v", e)
	}
	if e := env["GOMEMLIMIT"]; e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("GOMEMLIMIT is not the memory limit: %+v", e)
	}
	if ctr.Resources.Limits.Memory().IsZero() || ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want memory limit and cpu/memory requests", ctr.Resources)
	}
	sc := ctr.SecurityContext
	if sc == nil || ptr.Deref(sc.Privileged, false) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext %+v: want unprivileged, read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	if spec.PriorityClassName != "system-node-critical" || len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("priorityClassName %q tolerations %+v: want system-node-critical and one operator Exists", spec.PriorityClassName, spec.Tolerations)
	}
}

// The identity deploy/coordinator.yaml gives node-agent-coordinator.
const (
	coordinatorServiceAccount = "node-agent-coordinator"
	coordinatorUser           = "system:serviceaccount:" + deployNamespace + ":" + coordinatorServiceAccount
	coordinatorPolicy         = "node-agent-coordinator-grant-only"
	coordinatorEventsPolicy   = "node-agent-coordinator-own-events"
	// electionLease is node-agent-coordinator's --leader-election-name
	// default, which the Deployment leaves as it is.
	electionLease = "node-agent-coordinator"
	leasePolicy   = "node-agent-slot-leases"
)

// TestCoordinatorManifestsAgreeWithCode checks what deploy/ says about the
// drain slots against pkg/slots and the configuration: the coordinator's
// Deployment runs node-agent-coordinator on the agents' ConfigMap, its
// policy names the grant, its Lease Role lives in slots.namespace and
// names the election Lease; the agent holds no Lease right, and the Lease
// policy names the slot Leases and the election Lease.
func TestCoordinatorManifestsAgreeWithCode(t *testing.T) {
	objs := testenv.ReadDeployObjects(t)
	def := config.Default()

	var dep appsv1.Deployment
	testenv.DeployObject(t, objs, "Deployment", deployNamespace, "node-agent-coordinator", &dep)
	var ds appsv1.DaemonSet
	testenv.DeployObject(t, objs, "DaemonSet", deployNamespace, "node-agent", &ds)
	var pdb policyv1.PodDisruptionBudget
	testenv.DeployObject(t, objs, "PodDisruptionBudget", deployNamespace, "node-agent-coordinator", &pdb)

	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != coordinatorServiceAccount {
		t.Errorf("the coordinator runs as %s, want %s", spec.ServiceAccountName, coordinatorServiceAccount)
	}
	if ptr.Deref(dep.Spec.Replicas, 1) < 2 {
		t.Errorf("the coordinator has %d replicas; leader election wants at least 2", ptr.Deref(dep.Spec.Replicas, 1))
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	if len(ctr.Command) != 1 || filepath.Base(ctr.Command[0]) != "node-agent-coordinator" || !filepath.IsAbs(ctr.Command[0]) {
		t.Errorf("the coordinator's command %q is not the image's node-agent-coordinator", ctr.Command)
	}
	if dsImage := ds.Spec.Template.Spec.Containers[0].Image; ctr.Image != dsImage {
		t.Errorf("the coordinator runs image %s, the DaemonSet %s; both come from one image", ctr.Image, dsImage)
	}
	const cfgFile = "/etc/node-agent/config.yaml"
	if !slices.Equal(ctr.Args, []string{"--config=" + cfgFile}) {
		t.Errorf("the coordinator's args %q, want --config=%s alone", ctr.Args, cfgFile)
	}
	var mount *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		if m.MountPath == filepath.Dir(cfgFile) {
			mount = &ctr.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("nothing is mounted at %s", filepath.Dir(cfgFile))
	}
	var cmVolume *corev1.Volume
	for i, v := range spec.Volumes {
		if v.Name == mount.Name {
			cmVolume = &spec.Volumes[i]
		}
	}
	if cmVolume == nil || cmVolume.ConfigMap == nil || cmVolume.ConfigMap.Name != "node-agent-config" || mount.SubPath != "" || !mount.ReadOnly {
		t.Errorf("%s is not the whole ConfigMap node-agent-config, read-only: %+v %+v", filepath.Dir(cfgFile), mount, cmVolume)
	}
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	// node-agent-coordinator's --metrics-bind-address and
	// --health-probe-bind-address defaults.
	if ports["metrics"] != 9466 || ports["health"] != 9467 {
		t.Errorf("ports %v, want metrics 9466 and health 9467", ports)
	}
	// Ready is in the election, which a standby is too: /readyz passes only
	// on the leader (internal/runcoordinator), and a standby never Ready
	// would stall the rollout and the leader's eviction.
	for name, probe := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz/election": ctr.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe for %s: %+v", name, probe)
		}
	}
	// A new replica joins the election before an old one goes.
	if ru := dep.Spec.Strategy.RollingUpdate; dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() < 1 {
		t.Errorf("the coordinator's strategy %+v: want a rolling update that surges and keeps every replica until its successor is Ready", dep.Spec.Strategy)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	if e := env["POD_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME (the election identity) is not the downward API's metadata.name: %+v", e)
	}
	if ctr.Resources.Limits.Memory().IsZero() || ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want memory limit and cpu/memory requests", ctr.Resources)
	}
	sc, psc := ctr.SecurityContext, spec.SecurityContext
	if sc == nil || psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		ptr.Deref(sc.Privileged, false) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("securityContext %+v, pod %+v: want non-root, seccomp RuntimeDefault, read-only root, no privilege escalation, all capabilities dropped", sc, psc)
	}
	// The two workloads' selectors keep to their own pods.
	podLabels := dep.Spec.Template.Labels
	dsSel, depSel := ds.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels
	if subset(dsSel, podLabels) || subset(depSel, ds.Spec.Template.Labels) || !subset(depSel, podLabels) {
		t.Errorf("selectors overlap: DaemonSet %v, Deployment %v, coordinator pods %v", dsSel, depSel, podLabels)
	}
	if pdb.Spec.Selector == nil || !maps.Equal(pdb.Spec.Selector.MatchLabels, depSel) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v: want maxUnavailable 1 over the coordinator's pods %v", pdb.Spec, depSel)
	}

	// RBAC: the coordinator's Lease Role lives where the Leases are, and
	// names the election Lease; the agent's ServiceAccount holds no Lease
	// right anywhere.
	var leaseRole rbacv1.Role
	testenv.DeployObject(t, objs, "Role", def.Slots.Namespace, "node-agent-coordinator", &leaseRole)
	var byName []string
	for _, r := range leaseRole.Rules {
		if !slices.Contains(r.Resources, "leases") {
			t.Errorf("the coordinator's Lease Role grants %v", r.Resources)
		}
		if len(r.ResourceNames) > 0 {
			byName = append(byName, r.ResourceNames...)
			if slices.Contains(r.Verbs, "create") || slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "list") {
				t.Errorf("rule %+v: create, delete and list cannot be narrowed by name", r)
			}
		}
	}
	if !slices.Equal(byName, []string{electionLease}) {
		t.Errorf("the coordinator's Lease Role names %v, want the election Lease %s", byName, electionLease)
	}
	for _, r := range rolesOf(t, objs, deployServiceAccount) {
		if slices.Contains(r.Resources, "leases") || slices.Contains(r.Resources, "*") {
			t.Errorf("the agent's ServiceAccount is granted %v on %v; it must hold no Lease right", r.Verbs, r.Resources)
		}
	}
	for _, r := range rolesOf(t, objs, coordinatorServiceAccount) {
		// It lists a recovering node's pods (pkg/recovery), and does
		// nothing else with pods.
		readsPods := slices.Equal(r.Resources, []string{"pods"}) && slices.Equal(r.Verbs, []string{"list"})
		if !readsPods && slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "pods/eviction") || slices.Contains(r.Verbs, "delete") && slices.Contains(r.Resources, "nodes") {
			t.Errorf("the coordinator is granted %v on %v; it drains nothing, and only lists pods", r.Verbs, r.Resources)
		}
	}

	// The coordinator's policy: its ServiceAccount, the grant, Deny.
	var cp admissionregistrationv1.ValidatingAdmissionPolicy
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicy", "", coordinatorPolicy, &cp)
	var cb admissionregistrationv1.ValidatingAdmissionPolicyBinding
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicyBinding", "", coordinatorPolicy, &cb)
	wantMatchesServiceAccount(t, &cp, strings.TrimPrefix(coordinatorUser, "system:serviceaccount:"+deployNamespace+":"))
	if got := celStrings(policyVariable(t, &cp, "grantAnnotation")); !slices.Equal(got, []string{slots.GrantAnnotation}) {
		t.Errorf("policy %s grantAnnotation = %v, want %s", cp.Name, got, slots.GrantAnnotation)
	}
	if cb.Spec.PolicyName != cp.Name || !slices.Equal(cb.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v does not Deny with policy %s", cb.Spec, cp.Name)
	}
	// The managedFields rule keeps every entry but the coordinator's own.
	if got := celStrings(policyVariable(t, &cp, "fieldManager")); !slices.Equal(got, []string{slots.FieldManager}) {
		t.Errorf("policy %s fieldManager = %v, want slots.FieldManager %s", cp.Name, got, slots.FieldManager)
	}
	// Its Events: about Nodes, as itself (the component runcoordinator's
	// recorder names), Deny.
	var ep admissionregistrationv1.ValidatingAdmissionPolicy
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicy", "", coordinatorEventsPolicy, &ep)
	var eb admissionregistrationv1.ValidatingAdmissionPolicyBinding
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicyBinding", "", coordinatorEventsPolicy, &eb)
	wantMatchesServiceAccount(t, &ep, strings.TrimPrefix(coordinatorUser, "system:serviceaccount:"+deployNamespace+":"))
	if got := celStrings(policyVariable(t, &ep, "component")); !slices.Equal(got, []string{"node-agent-coordinator"}) {
		t.Errorf("policy %s component = %v, want node-agent-coordinator (internal/runcoordinator's event source)", ep.Name, got)
	}
	if eb.Spec.PolicyName != ep.Name || !slices.Equal(eb.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v does not Deny with policy %s", eb.Spec, ep.Name)
	}

	// The agent's Lease policy: its ServiceAccount, the slot Leases by name
	// and label, the election Lease, Deny.
	var lp admissionregistrationv1.ValidatingAdmissionPolicy
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicy", "", leasePolicy, &lp)
	var lb admissionregistrationv1.ValidatingAdmissionPolicyBinding
	testenv.DeployObject(t, objs, "ValidatingAdmissionPolicyBinding", "", leasePolicy, &lb)
	wantMatchesServiceAccount(t, &lp, deployServiceAccount)
	for v, want := range map[string]string{"slotPrefix": slots.SlotPrefix, "slotLabel": slots.SlotLabel, "electionLease": electionLease, "lastRebootLease": slots.LastRebootLease} {
		if got := celStrings(policyVariable(t, &lp, v)); !slices.Equal(got, []string{want}) {
			t.Errorf("policy %s %s = %v, want %s", lp.Name, v, got, want)
		}
	}
	if !strings.HasPrefix(slots.LeaseName("node-1"), slots.SlotPrefix) {
		t.Errorf("slots.LeaseName(node-1) = %s does not start with slots.SlotPrefix %s", slots.LeaseName("node-1"), slots.SlotPrefix)
	}
	if lb.Spec.PolicyName != lp.Name || !slices.Equal(lb.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v does not Deny with policy %s", lb.Spec, lp.Name)
	}
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// rolesOf returns the rules of every Role and ClusterRole of objs that a
// RoleBinding or ClusterRoleBinding of objs grants to the ServiceAccount sa
// of deployNamespace.
func rolesOf(t *testing.T, objs []*unstructured.Unstructured, sa string) []rbacv1.PolicyRule {
	t.Helper()
	type ref struct{ kind, namespace, name string }
	rules := map[ref][]rbacv1.PolicyRule{}
	var bound []ref
	for _, o := range objs {
		switch o.GetKind() {
		case "Role", "ClusterRole":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			rules[ref{o.GetKind(), o.GetNamespace(), o.GetName()}] = r.Rules
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == deployNamespace
			}) {
				ns := o.GetNamespace()
				if b.RoleRef.Kind == "ClusterRole" {
					ns = ""
				}
				bound = append(bound, ref{b.RoleRef.Kind, ns, b.RoleRef.Name})
			}
		}
	}
	if len(bound) == 0 {
		t.Fatalf("deploy/ binds no role to the ServiceAccount %s/%s", deployNamespace, sa)
	}
	var out []rbacv1.PolicyRule
	for _, r := range bound {
		if _, ok := rules[r]; !ok {
			t.Errorf("a binding of %s names %s %s/%s, which deploy/ does not have", sa, r.kind, r.namespace, r.name)
		}
		out = append(out, rules[r]...)
	}
	return out
}

// TestRebootComponentAgreesWithCode checks deploy/components/reboot against
// the code without rendering it (test/integration renders it with kubectl
// and dry-runs it): its arguments are flags of `node-agent run` that turn the
// coordinator on and validate, and its sentinel file is the default one of
// the host (/run/reboot-required) as seen through the component's read-only
// mount of the host's /run. It turns reboots on in the coordinator too,
// which refuses reboot slots otherwise.
func TestRebootComponentAgreesWithCode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.DeployDir(t), "components", "reboot", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var comp struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Patches    []struct {
			Target struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"target"`
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	if err := yaml.UnmarshalStrict(data, &comp); err != nil {
		t.Fatal(err)
	}
	if comp.Kind != "Component" || len(comp.Patches) != 2 || comp.Patches[0].Target.Kind != "Deployment" || comp.Patches[0].Target.Name != "node-agent-coordinator" ||
		comp.Patches[1].Target.Kind != "DaemonSet" || comp.Patches[1].Target.Name != "node-agent" {
		t.Fatalf("want a Component with a patch of Deployment node-agent-coordinator, then one of DaemonSet node-agent, got %+v", comp)
	}
	type op struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	var coordOps []op
	if err := yaml.UnmarshalStrict([]byte(comp.Patches[0].Patch), &coordOps); err != nil {
		t.Fatal(err)
	}
	if len(coordOps) != 1 || coordOps[0].Op != "add" || coordOps[0].Path != "/spec/template/spec/containers/0/args/-" || string(coordOps[0].Value) != `"--reboot-enabled=true"` {
		t.Errorf("the coordinator's patch %+v is not the one added argument --reboot-enabled=true", coordOps)
	}
	var ops []op
	if err := yaml.UnmarshalStrict([]byte(comp.Patches[1].Patch), &ops); err != nil {
		t.Fatal(err)
	}
	var args []string
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	for _, op := range ops {
		if op.Op != "add" {
			t.Errorf("op %s %s: the component only adds", op.Op, op.Path)
			continue
		}
		var into any
		switch op.Path {
		case "/spec/template/spec/containers/0/args/-":
			args = append(args, "")
			into = &args[len(args)-1]
		case "/spec/template/spec/containers/0/volumeMounts/-":
			mounts = append(mounts, corev1.VolumeMount{})
			into = &mounts[len(mounts)-1]
		case "/spec/template/spec/volumes/-":
			volumes = append(volumes, corev1.Volume{})
			into = &volumes[len(volumes)-1]
		default:
			t.Errorf("op add %s: not a path this test knows", op.Path)
			continue
		}
		if err := yaml.UnmarshalStrict(op.Value, into); err != nil {
			t.Errorf("op add %s: %v", op.Path, err)
		}
	}

	cfg := config.Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the component's args %q are not flags of node-agent run: %v", args, err)
	}
	if fs.NArg() != 0 {
		t.Errorf("the component's args leave %q unparsed", fs.Args())
	}
	if !cfg.Reboot.Enabled {
		t.Errorf("the component's args %q do not turn reboot.enabled on", args)
	}
	cfg.NodeName = "node-1"
	if err := cfg.Validate(); err != nil {
		t.Errorf("the configuration with the component's args does not validate: %v", err)
	}

	if len(mounts) != 1 || len(volumes) != 1 || mounts[0].Name != volumes[0].Name {
		t.Fatalf("want one mount of one new volume, got mounts %+v volumes %+v", mounts, volumes)
	}
	m, v := mounts[0], volumes[0]
	if v.HostPath == nil || v.HostPath.Path != "/run" {
		t.Fatalf("volume %+v is not the host's /run", v)
	}
	if !m.ReadOnly || m.MountPropagation != nil || m.SubPath != "" {
		t.Errorf("mount %+v: want read-only, no propagation, no subPath", m)
	}
	onHost, err := filepath.Rel(m.MountPath, cfg.Reboot.SentinelFile)
	if err != nil || strings.HasPrefix(onHost, "..") {
		t.Fatalf("reboot.sentinelFile %s is not under the mount %s", cfg.Reboot.SentinelFile, m.MountPath)
	}
	if got, want := filepath.Join(v.HostPath.Path, onHost), config.Default().Reboot.SentinelFile; got != want {
		t.Errorf("the component watches the host's %s, want %s (reboot.sentinelFile's default, the host's path)", got, want)
	}
}

// matchServiceAccount is the one matchCondition every policy has: the
// ServiceAccount by name, in any namespace, as a regular expression.
var matchServiceAccount = regexp.MustCompile(`^request\.userInfo\.username\.matches\('(\^system:serviceaccount:\[\^:\]\+:[a-z0-9-]+\$)'\)$`)

// wantMatchesServiceAccount checks that p matches the ServiceAccount sa in
// the install's namespace and in any other, and nothing else: not a name
// that only starts or ends like it, nor another namespace's other account.
func wantMatchesServiceAccount(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, sa string) {
	t.Helper()
	if len(p.Spec.MatchConditions) != 1 {
		t.Errorf("policy %s: matchConditions %+v, want one", p.Name, p.Spec.MatchConditions)
		return
	}
	m := matchServiceAccount.FindStringSubmatch(p.Spec.MatchConditions[0].Expression)
	if m == nil {
		t.Errorf("policy %s: matchCondition %q is not request.userInfo.username.matches('^system:serviceaccount:[^:]+:<name>$')", p.Name, p.Spec.MatchConditions[0].Expression)
		return
	}
	re := regexp.MustCompile(m[1])
	for user, want := range map[string]bool{
		"system:serviceaccount:" + deployNamespace + ":" + sa: true,
		"system:serviceaccount:ops:" + sa:                     true,
		"system:serviceaccount:ops:" + sa + "-x":              false,
		"system:serviceaccount:ops:x-" + sa:                   false,
		"system:serviceaccount:a:b:" + sa:                     false,
		"system:node:" + sa:                                   false,
	} {
		if re.MatchString(user) != want {
			t.Errorf("policy %s: %q matches %s: %v, want %v", p.Name, m[1], user, !want, want)
		}
	}
}
