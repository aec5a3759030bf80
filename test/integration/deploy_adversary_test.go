package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/confinement"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/selfdrain"

	"github.com/node-agent/node-agent/test/testenv"
)

// This file holds what an attacker with one actor's rights can do on the
// real control plane with deploy/ as shipped, each case with the exact
// refusal or the bounded outcome. The actors and where their cases are:
//   - a token bound to node-1's agent pod: deploy_test.go testPrivilege
//     (Nodes, pods, NodeMaintenance), deploy_coordinator_test.go (drain
//     slots and Leases), and testEventsOnlyAboutItsNode here;
//   - a tenant with pod, Deployment and PodDisruptionBudget rights in one
//     namespace: deploy_tenant_test.go;
//   - a user with the namespace edit role in node-agent, who may write the
//     ConfigMap: testConfigMapWriter here.

// byEventsPolicy is how the apiserver names the Events policy's refusals.
const byEventsPolicy = `ValidatingAdmissionPolicy 'node-agent-own-events'`

// testEventsOnlyAboutItsNode: a token bound to node-1's agent pod may record
// and update node-agent's own Events about node-1, and no other Event.
func (b *deployBed) testEventsOnlyAboutItsNode(t *testing.T) {
	ctx := t.Context()
	token := b.boundToken(t, b.agentPod(t, "node-1"))
	sa := b.tokenClient(t, token)
	events := sa.CoreV1().Events(metav1.NamespaceDefault)
	event := func(node, component, host string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: node + ".", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)},
			Reason:         "Rebooting", Message: "forged by a test", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: component, Host: host}, Count: 1}
	}

	// The acceptance case: the Warning "Rebooting" about node-2 that a
	// token bound to node-1's pod could create before.
	_, err := events.Create(ctx, event("node-2", "node-agent", "node-2"), metav1.CreateOptions{})
	wantDenied(t, "create a Warning Rebooting Event about node-2", err, byEventsPolicy)
	if err != nil && !strings.Contains(err.Error(), "node-agent on Node node-1 may record Events only about that Node, not about Node node-2") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	_, err = events.Create(ctx, event("node-1", "kubelet", "node-1"), metav1.CreateOptions{})
	wantDenied(t, "create an Event about node-1 as the kubelet", err, "may record Events only as node-agent on that Node")
	_, err = events.Create(ctx, event("node-1", "node-agent", "node-2"), metav1.CreateOptions{})
	wantDenied(t, "create an Event about node-1 reported from node-2", err, "may record Events only as node-agent on that Node")
	pod := event("node-1", "node-agent", "node-1")
	pod.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Namespace: metav1.NamespaceDefault, Name: "x"}
	_, err = events.Create(ctx, pod, metav1.CreateOptions{})
	wantDenied(t, "create an Event about a Pod in default", err, "not about Pod x")
	related := event("node-1", "node-agent", "node-1")
	related.Related = &corev1.ObjectReference{Kind: "Node", Name: "node-2"}
	_, err = events.Create(ctx, related, metav1.CreateOptions{})
	wantDenied(t, "create an Event about node-1 related to node-2", err, "may relate its Events only to that Node")

	// Its own Event about node-1: created, and its count patched as the
	// recorder does with a repeat; not turned into one about node-2.
	own, err := events.Create(ctx, event("node-1", "node-agent", "node-1"), metav1.CreateOptions{})
	wantAllowed(t, "create node-agent's Event about node-1", err)
	if err != nil {
		return
	}
	_, err = events.Patch(ctx, own.Name, types.StrategicMergePatchType, []byte(`{"count":2,"message":"again"}`), metav1.PatchOptions{})
	wantAllowed(t, "patch its count", err)
	_, err = events.Patch(ctx, own.Name, types.StrategicMergePatchType, []byte(`{"involvedObject":{"name":"node-2","uid":"node-2"}}`), metav1.PatchOptions{})
	wantDenied(t, "patch it into an Event about node-2", err, "may record Events only about that Node")
	_, err = events.Patch(ctx, own.Name, types.StrategicMergePatchType, []byte(`{"source":{"component":"kubelet"},"reportingComponent":"kubelet"}`), metav1.PatchOptions{})
	wantDenied(t, "patch it into the kubelet's", err, "may record Events only as node-agent on that Node")

	// The kubelet's Event about node-1 (written here by the admin): the
	// agent's token may not rewrite it, though it is about its own Node.
	kubelet, err := b.c.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "node-1.", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-1", UID: "node-1"},
		Reason:         "Rebooted", Message: "Node node-1 has been rebooted", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "kubelet", Host: "node-1"}, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = events.Patch(ctx, kubelet.Name, types.StrategicMergePatchType,
		[]byte(`{"message":"nothing happened","source":{"component":"node-agent"},"reportingComponent":"node-agent"}`), metav1.PatchOptions{})
	wantDenied(t, "rewrite the kubelet's Event about node-1", err, "may change only the Events it recorded about that Node")
	err = events.Delete(ctx, own.Name, metav1.DeleteOptions{})
	wantDenied(t, "delete its own Event", err, byRBAC+` delete resource "events"`)

	// Should a later grant give the agent delete and the events.k8s.io API
	// too, the policy alone still holds.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-events", Namespace: metav1.NamespaceDefault},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"delete"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch", "delete"}},
		}}
	bind := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: metav1.NamespaceDefault},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: agentServiceAccount}}}
	if _, err := b.c.RbacV1().Roles(metav1.NamespaceDefault).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RbacV1().RoleBindings(metav1.NamespaceDefault).Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = b.c.RbacV1().RoleBindings(metav1.NamespaceDefault).Delete(context.Background(), bind.Name, metav1.DeleteOptions{})
		_ = b.c.RbacV1().Roles(metav1.NamespaceDefault).Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	}()
	newAPI := sa.EventsV1().Events(metav1.NamespaceDefault)
	v1event := func(node string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-", Namespace: metav1.NamespaceDefault},
			EventTime: metav1.NewMicroTime(time.Now()), Regarding: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)},
			Reason: "Rebooting", Note: "forged by a test", Type: corev1.EventTypeWarning, Action: "Reboot",
			ReportingController: "node-agent", ReportingInstance: node}
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	testenv.WaitFor(t, 30*time.Second, "RBAC to allow the agent events.k8s.io Events", func() (bool, error) {
		_, err := newAPI.Create(ctx, v1event("node-1"), dry)
		return err == nil, err
	})
	t.Log("allowed: create an events.k8s.io Event about node-1 (dry run)")
	_, err = newAPI.Create(ctx, v1event("node-2"), dry)
	wantDenied(t, "create an events.k8s.io Event about node-2 (dry run)", err, "may record Events only about that Node, not about Node node-2")
	err = events.Delete(ctx, own.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	wantDenied(t, "delete its own Event, with delete granted (dry run)", err, "node-agent never deletes Events")
	err = newAPI.Delete(ctx, kubelet.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	wantDenied(t, "delete the kubelet's Event through events.k8s.io (dry run)", err, "node-agent never deletes Events")
}

// configEditor is the user with namespace edit in node-agent.
const configEditor = "config-editor"

// testConfigMapWriter is issue 40's first acceptance: whoever may write
// node-agent's ConfigMap (here a Role on that one ConfigMap, the delegation
// the README recommends, and a namespace editor) gets no more than the
// ConfigMap's keys give. The writer adds a kubeconfig whose user is an exec
// credential plugin, as a second key of the ConfigMap and also as a file
// elsewhere on the host, and points kubeconfig: at it; then, one by one,
// every key the agent takes only from its command line
// (config.DaemonSetOnlyKeys), each with a hostile value. The file reaches
// the agent as the shipped DaemonSet mounts it (only the items its config
// volume projects), and the agent is started as in the pod: no --kubeconfig,
// no $KUBECONFIG. It must refuse to start with a line naming the key, and
// run nothing: every program is a script that leaves a mark.
func (b *deployBed) testConfigMapWriter(t *testing.T) {
	ctx := t.Context()
	writers := map[string]kubernetes.Interface{
		configMapWriter: b.configMapOnlyWriter(t),
		configEditor:    b.namespaceEditor(t),
	}
	original, err := b.c.CoreV1().ConfigMaps(agentNamespace).Get(ctx, "node-agent-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		restore := original.DeepCopy()
		restore.ResourceVersion = ""
		if cur, err := b.c.CoreV1().ConfigMaps(agentNamespace).Get(context.Background(), restore.Name, metav1.GetOptions{}); err == nil {
			restore.ResourceVersion = cur.ResourceVersion
		}
		if _, err := b.c.CoreV1().ConfigMaps(agentNamespace).Update(context.Background(), restore, metav1.UpdateOptions{}); err != nil {
			t.Errorf("restoring the ConfigMap: %v", err)
		}
	}()

	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	script := filepath.Join(dir, "payload.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A kubeconfig whose user runs the payload to get a credential, as
	// client-go runs an exec plugin before its first request.
	evil := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: %s, interactiveMode: Never}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, b.env.Server(), script)
	hostKubeconfig := filepath.Join(dir, "elsewhere.kubeconfig")
	if err := os.WriteFile(hostKubeconfig, []byte(evil), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the shipped DaemonSet's config volume projects of the ConfigMap.
	var ds appsv1.DaemonSet
	testenv.DeployObject(t, testenv.ReadDeployObjects(t), "DaemonSet", agentNamespace, "node-agent", &ds)
	var items []corev1.KeyToPath
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			items = v.ConfigMap.Items
		}
	}
	if len(items) != 1 || items[0].Key != "config.yaml" {
		t.Errorf("the DaemonSet's config volume projects %v; want only the key config.yaml, so that a key a ConfigMap writer adds never reaches the pod", items)
	}
	// project writes into mdir what the kubelet mounts of cm there.
	project := func(t *testing.T, mdir string, cm *corev1.ConfigMap) {
		t.Helper()
		for _, it := range items {
			if err := os.WriteFile(filepath.Join(mdir, it.Path), []byte(cm.Data[it.Key]), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A hostile value for every key a config file may not set; a key
	// without one here fails the test.
	hostile := map[string]func(cfg map[string]any, mdir string){
		"kubeconfig": func(cfg map[string]any, mdir string) { cfg["kubeconfig"] = hostKubeconfig },
		"nodeName":   func(cfg map[string]any, _ string) { cfg["nodeName"] = "node-2" },
		"metricsBindAddress": func(cfg map[string]any, _ string) {
			cfg["metricsBindAddress"] = ":9465"
		},
		"healthProbeBindAddress": func(cfg map[string]any, _ string) { cfg["healthProbeBindAddress"] = "0" },
		"stateDir":               func(cfg map[string]any, _ string) { cfg["stateDir"] = "/etc" },
		"labeller.libvirtURI": func(cfg map[string]any, _ string) {
			section(cfg, "labeller")["libvirtURI"] = "qemu+ext:///system?command=" + script
		},
		"shutdown.systemBusAddress": func(cfg map[string]any, _ string) {
			section(cfg, "shutdown")["systemBusAddress"] = "unix:path=" + filepath.Join(dir, "bus")
		},
		"shutdown.manageLogindConfig": func(cfg map[string]any, _ string) { section(cfg, "shutdown")["manageLogindConfig"] = true },
		"shutdown.logindDropInDir":    func(cfg map[string]any, _ string) { section(cfg, "shutdown")["logindDropInDir"] = "/etc/cron.d" },
		"reboot.sentinelFile": func(cfg map[string]any, _ string) {
			section(cfg, "reboot")["enabled"] = true
			section(cfg, "reboot")["sentinelFile"] = "/etc/hostname"
		},
		"reboot.sentinelCommand": func(cfg map[string]any, _ string) {
			section(cfg, "reboot")["enabled"] = true
			section(cfg, "reboot")["sentinelCommand"] = []any{script}
		},
		"notifications.webhooks[].urlFile": func(cfg map[string]any, _ string) {
			section(cfg, "notifications")["webhooks"] = []any{map[string]any{"name": "x", "urlFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}
		},
	}
	type attempt struct {
		name, key, writer string
		set               func(cfg map[string]any, mdir string)
		extra             map[string]string // keys added beside config.yaml
	}
	var attempts []attempt
	// The attack of the issue: the kubeconfig as a second key of the
	// ConfigMap, which the DaemonSet must not even mount.
	attempts = append(attempts, attempt{name: "kubeconfig added to the ConfigMap", key: "kubeconfig", writer: configMapWriter, extra: map[string]string{"kubeconfig": evil},
		set: func(cfg map[string]any, mdir string) { cfg["kubeconfig"] = filepath.Join(mdir, "kubeconfig") }})
	for _, key := range config.DaemonSetOnlyKeys() {
		set, ok := hostile[key]
		if !ok {
			t.Errorf("no hostile value for %s, a key the agent takes only from its command line: add one here", key)
			continue
		}
		attempts = append(attempts, attempt{key: key, writer: configMapWriter, set: set})
	}
	// The namespace editor, once, with the key that ran a program before.
	attempts = append(attempts, attempt{key: "reboot.sentinelCommand", writer: configEditor, set: hostile["reboot.sentinelCommand"]})

	for _, a := range attempts {
		if a.name == "" {
			a.name = a.key
		}
		t.Run(a.name+" by "+a.writer, func(t *testing.T) {
			cms := writers[a.writer].CoreV1().ConfigMaps(agentNamespace)
			cur, err := cms.Get(ctx, original.Name, metav1.GetOptions{})
			wantAllowed(t, "read node-agent's ConfigMap as "+a.writer, err)
			if err != nil {
				return
			}
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(original.Data["config.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			// The pod's /etc/node-agent: a value may name a file there.
			mdir := t.TempDir()
			a.set(cfg, mdir)
			data, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cur.Data = map[string]string{"config.yaml": string(data)}
			for k, v := range a.extra {
				cur.Data[k] = v
			}
			_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
			wantAllowed(t, "write "+a.key+" into node-agent's ConfigMap as "+a.writer, err)
			stored, err := b.c.CoreV1().ConfigMaps(agentNamespace).Get(ctx, original.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			project(t, mdir, stored)
			for k := range a.extra {
				if _, err := os.Stat(filepath.Join(mdir, k)); err == nil {
					t.Errorf("the key %s a ConfigMap writer added reached the pod's mount", k)
				}
			}
			runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(runCtx, agentBinary, "run", "--config", filepath.Join(mdir, "config.yaml"), "--node-name", "node-1",
				"--metrics-bind-address=0", "--health-probe-bind-address=0", "--state-dir", dir, "--shutdown-enabled=false")
			// As in the pod: no kubeconfig but what the file might name.
			cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+dir)
			out, err := cmd.CombinedOutput()
			want := a.key + " is taken only from the DaemonSet's arguments"
			switch {
			case err == nil:
				t.Errorf("node-agent run started and stopped with the ConfigMap holding %s; want a refusal:\n%s", a.key, out)
			case runCtx.Err() != nil:
				t.Errorf("node-agent run kept running with the ConfigMap holding %s; want a refusal:\n%s", a.key, lastLines(string(out), 20))
			case !strings.Contains(string(out), want):
				t.Errorf("node-agent run refused to start, without saying %q:\n%s", want, lastLines(string(out), 20))
			default:
				t.Logf("refused at start: %s", strings.TrimSpace(lastLines(string(out), 1)))
			}
			if _, err := os.Stat(mark); err == nil {
				t.Errorf("the host ran %s, after %s wrote %s into the ConfigMap", script, a.writer, a.key)
				_ = os.Remove(mark)
			}
		})
	}
}

// configMapWriter is the user with a Role on node-agent's ConfigMap only.
const configMapWriter = "config-writer"

// configMapOnlyWriter returns a client for a ServiceAccount of another
// namespace that may get and update node-agent-config and nothing else.
func (b *deployBed) configMapOnlyWriter(t *testing.T) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	if _, err := b.c.CoreV1().ServiceAccounts(tenantNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: configMapWriter}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RbacV1().Roles(agentNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: configMapWriter},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{"node-agent-config"}, Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RbacV1().RoleBindings(agentNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: configMapWriter},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: configMapWriter},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: configMapWriter, Namespace: tenantNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := b.c.CoreV1().ServiceAccounts(tenantNamespace).CreateToken(ctx, configMapWriter, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := b.tokenClient(t, tr.Status.Token)
	testenv.WaitFor(t, 30*time.Second, "RBAC to allow "+configMapWriter+" node-agent's ConfigMap", func() (bool, error) {
		_, err := w.CoreV1().ConfigMaps(agentNamespace).Get(ctx, "node-agent-config", metav1.GetOptions{})
		return err == nil, nil
	})
	// It may write that ConfigMap only.
	_, err = w.CoreV1().ConfigMaps(agentNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	wantDenied(t, "create another ConfigMap in node-agent as "+configMapWriter+" (dry run)", err, "forbidden")
	return w
}

// namespaceEditor returns a client for a ServiceAccount of another
// namespace bound to the built-in edit ClusterRole in node-agent.
func (b *deployBed) namespaceEditor(t *testing.T) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	if _, err := b.c.CoreV1().ServiceAccounts(tenantNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: configEditor}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RbacV1().RoleBindings(agentNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: configEditor},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: configEditor, Namespace: tenantNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := b.c.CoreV1().ServiceAccounts(tenantNamespace).CreateToken(ctx, configEditor, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	editor := b.tokenClient(t, tr.Status.Token)
	testenv.WaitFor(t, 30*time.Second, "RBAC to allow "+configEditor+" node-agent's ConfigMap", func() (bool, error) {
		_, err := editor.CoreV1().ConfigMaps(agentNamespace).Get(ctx, "node-agent-config", metav1.GetOptions{})
		return err == nil, nil
	})
	return editor
}

// section returns cfg[key] as a map, made if missing.
func section(cfg map[string]any, key string) map[string]any {
	m, ok := cfg[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		cfg[key] = m
	}
	return m
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testAdminIntentWins: a cordon and a drain taint that the admin set on
// node-1 stay, whatever a token bound to node-1's agent pod asks, unless the
// agent's record says it set them.
func (b *deployBed) testAdminIntentWins(t *testing.T) {
	sa := b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))
	drainTaint := corev1.Taint{Key: testenv.DrainTaint.Key, Value: "admin", Effect: corev1.TaintEffectNoSchedule}
	setNode := func(unschedulable bool, taints []corev1.Taint, record any) {
		t.Helper()
		if err := mergePatchNode(t, b.c, "node-1", obj{
			"metadata": obj{"annotations": obj{selfdrain.StatusAnnotation: record}},
			"spec":     obj{"unschedulable": unschedulable, "taints": taints},
		}, false); err != nil {
			t.Fatal(err)
		}
	}
	base := getNode(t, b.c, "node-1").Spec.Taints
	defer setNode(false, base, nil)
	withDrain := append(slices.Clone(base), drainTaint)

	// The drain taint is removed by a JSON patch that names it by its
	// index, with a test op: the node lifecycle controller adds its own
	// node.kubernetes.io/unschedulable taint to a cordoned node at a time
	// of its choosing, and a whole new list could drop that one.
	removeDrainTaint := func() error {
		t.Helper()
		n := getNode(t, b.c, "node-1")
		i := slices.IndexFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == drainTaint.Key })
		if i < 0 {
			t.Fatalf("node-1 has no %s taint: %v", drainTaint.Key, n.Spec.Taints)
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/spec/taints/%d/key","value":%q},{"op":"remove","path":"/spec/taints/%[1]d"}]`, i, drainTaint.Key)
		_, err := sa.CoreV1().Nodes().Patch(t.Context(), "node-1", types.JSONPatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, record := range []any{nil, `{"phase":"Running","cordonedByAgent":false,"taintedByAgent":false}`} {
		setNode(true, withDrain, record)
		what := fmt.Sprintf("(record %v)", record)
		wantDenied(t, "uncordon node-1, cordoned by the admin "+what, mergePatchNode(t, sa, "node-1", obj{"spec": obj{"unschedulable": false}}, true),
			"may lift only a cordon and remove only a "+drainTaint.Key+" taint that its record")
		wantDenied(t, "remove the admin's drain taint from node-1 "+what, removeDrainTaint(),
			"may lift only a cordon and remove only a "+drainTaint.Key+" taint that its record")
	}
	setNode(true, withDrain, `{"phase":"Succeeded","cordonedByAgent":true,"taintedByAgent":true}`)
	wantAllowed(t, "uncordon node-1, the agent's cordon by its record",
		mergePatchNode(t, sa, "node-1", obj{"spec": obj{"unschedulable": false}}, true))
	wantAllowed(t, "remove the drain taint, the agent's by its record", removeDrainTaint())
}

// testNodeAllowList: the Node policy compares everything outside the agent's
// fields, so fields it names nowhere are protected too: status.declaredFeatures
// (Kubernetes 1.36, NodeDeclaredFeatures) and spec.podCIDR.
func (b *deployBed) testNodeAllowList(t *testing.T) {
	ctx := t.Context()
	sa := b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	// The admin's write shows the apiserver keeps the field (its feature
	// gate is on), so the agent's refusal below is the policy's doing.
	n, err := b.c.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(`{"status":{"declaredFeatures":["DeployTestFeature"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Status.DeclaredFeatures, "DeployTestFeature") {
		t.Fatalf("the apiserver dropped status.declaredFeatures (%v): the case cannot show the policy", n.Status.DeclaredFeatures)
	}
	_, err = sa.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{"status":{"declaredFeatures":["Forged"]}}`), dry, "status")
	wantDenied(t, "change node-1's status.declaredFeatures", err, "may change only its own conditions in a Node's status")
	_, err = sa.CoreV1().Nodes().Patch(ctx, "node-1", types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/declaredFeatures"}]`), dry, "status")
	wantDenied(t, "remove node-1's status.declaredFeatures", err, "may change only its own conditions in a Node's status")
	if getNode(t, b.c, "node-1").Spec.PodCIDR == "" {
		_, err = sa.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.99.0.0/24"}}`), dry)
		wantDenied(t, "set node-1's spec.podCIDR", err, "may change only spec.unschedulable, the drain taint and the reboot-pending taint in a Node's spec")
	}
	if _, err := b.c.CoreV1().Nodes().Patch(ctx, "node-1", types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/declaredFeatures"}]`), metav1.PatchOptions{}, "status"); err != nil {
		t.Error(err)
	}
}

// testLifecycleConditionsOnlyItsOwn: of the node lifecycle conditions
// (KEP-5683), which admins and other tools write too, a token bound to
// node-1's agent pod may set, change and remove only those whose reason
// marks them as node-agent's (NodeAgent...); an admin's stays as it is. The
// apiserver keeps the conditions on any release, so this holds on 1.36.
func (b *deployBed) testLifecycleConditionsOnlyItsOwn(t *testing.T) {
	ctx := t.Context()
	sa := b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	status := func(c kubernetes.Interface, typ, reason string) error {
		patch := fmt.Appendf(nil, `{"status":{"conditions":[{"type":%q,"status":"True","reason":%q}]}}`, typ, reason)
		_, err := c.CoreV1().Nodes().Patch(ctx, "node-1", types.StrategicMergePatchType, patch, dry, "status")
		return err
	}
	const msg = "whose reason starts with NodeAgent"
	wantAllowed(t, "set node-1's DrainInProgress as node-agent's", status(sa, "DrainInProgress", "NodeAgentDraining"))
	wantDenied(t, "set node-1's DrainInProgress with another writer's reason", status(sa, "DrainInProgress", "ChangeTicket42"), msg)
	wantDenied(t, "set node-1's Ready", status(sa, "Ready", "NodeAgentDraining"), msg)
	if _, err := b.c.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(`{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"ChangeTicket42"}]}}`)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := b.c.CoreV1().Nodes().PatchStatus(context.Background(), "node-1", []byte(`{"status":{"conditions":[{"type":"MaintenancePlanned","$patch":"delete"}]}}`)); err != nil {
			t.Error(err)
		}
	}()
	wantDenied(t, "take over the admin's MaintenancePlanned on node-1", status(sa, "MaintenancePlanned", "NodeAgentWaitingForDrainSlot"), msg)
	_, err := sa.CoreV1().Nodes().Patch(ctx, "node-1", types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"MaintenancePlanned","$patch":"delete"}]}}`), dry, "status")
	wantDenied(t, "remove the admin's MaintenancePlanned from node-1", err, msg)
}

// testRenamedInstall: the policies match the agent's ServiceAccount by name
// in any namespace, so an install into another namespace stays confined;
// under another ServiceAccount name they do not match, and the agent's start
// check (pkg/confinement) says so on the Node instead of staying silent.
func (b *deployBed) testRenamedInstall(t *testing.T) {
	ctx := t.Context()
	const ns = "ops"
	if _, err := b.env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// An identity as an install into ns gives it: a ServiceAccount bound to
	// the agent's ClusterRole, and a pod on node-2 its token is bound to.
	identity := func(sa string) kubernetes.Interface {
		t.Helper()
		if _, err := b.c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "node-agent"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}
		if _, err := b.c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = b.c.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
		pod, err := b.c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sa},
			Spec: corev1.PodSpec{NodeName: "node-2", ServiceAccountName: sa, Tolerations: []corev1.Toleration{testenv.KwokToleration()},
				Containers: []corev1.Container{{Name: "agent", Image: "node-agent:dev"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := b.c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := b.tokenClient(t, tr.Status.Token)
		testenv.WaitFor(t, 30*time.Second, "RBAC to allow "+ns+"/"+sa+" Nodes", func() (bool, error) {
			_, err := c.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
			return err == nil, err
		})
		return c
	}
	foreignLabel := obj{"metadata": obj{"labels": obj{"example.com/renamed": "true"}}}

	renamedNamespace := identity("node-agent")
	wantDenied(t, "the agent of an install into "+ns+" labels its node-2 outside its prefixes", mergePatchNode(t, renamedNamespace, "node-2", foreignLabel, true),
		"may change only labels under its own prefixes")
	wantDenied(t, "the agent of an install into "+ns+" cordons node-3", mergePatchNode(t, renamedNamespace, "node-3", obj{"spec": obj{"unschedulable": true}}, true),
		"may change only that Node, not node-3")
	if got, err := confinement.Probe(ctx, kubetest.Wrap(renamedNamespace), "node-2"); got != confinement.Enforced {
		t.Errorf("the start check of an install into %s finds the policy %s (%v), want enforced", ns, got, err)
	}

	renamedAccount := identity("my-agent")
	got, err := confinement.Probe(ctx, kubetest.Wrap(renamedAccount), "node-2")
	if got != confinement.NotEnforced {
		t.Errorf("the start check of an install as %s/my-agent finds the policy %s (%v), want not enforced", ns, got, err)
	}
	wantAllowed(t, "what that check warns of: the agent "+ns+"/my-agent cordons node-3 (dry run)",
		mergePatchNode(t, renamedAccount, "node-3", obj{"spec": obj{"unschedulable": true}}, true))
}

// testOwnNodeReadAsNode: the agent reads its own Node as the node (the
// Node authorizer allows a node its own Node only); reading another Node,
// or every Node, that way is refused.
func (b *deployBed) testOwnNodeReadAsNode(t *testing.T) {
	ctx := t.Context()
	node1 := b.impersonatingClient(t, b.boundToken(t, b.agentPod(t, "node-1")), "node-1")
	_, err := node1.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	wantAllowed(t, "get node-1 as node-1", err)
	_, err = node1.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-1"})
	wantAllowed(t, "list node-1 as node-1 (metadata.name=node-1)", err)
	w, err := node1.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-1"})
	wantAllowed(t, "watch node-1 as node-1 (metadata.name=node-1)", err)
	if err == nil {
		w.Stop()
	}
	_, err = node1.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
	wantDenied(t, "get node-2 as node-1", err, `User "system:node:node-1" cannot get resource "nodes"`)
	_, err = node1.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	wantDenied(t, "list every Node as node-1", err, `User "system:node:node-1" cannot list resource "nodes"`)
	_, err = b.impersonatingClient(t, b.boundToken(t, b.agentPod(t, "node-1")), "node-2").CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
	wantDenied(t, "get node-2 as node-2 (another node's identity)", err, "impersonate")
}
