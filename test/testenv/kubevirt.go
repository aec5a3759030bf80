package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// KubeVirtStandIn stands in, for integration tests where KubeVirt cannot
// run, for the parts of KubeVirt a node drain meets: virt-api's validating
// webhook on pods/eviction, and virt-controller's evacuation and migration
// controllers. It was written from KubeVirt's documented behaviour, not from
// its code, and works on kubevirt.io/v1 VirtualMachineInstances (VMIs) and
// VirtualMachineInstanceMigrations (VMIMs), whose CRDs the caller installs.
//
// What it emulates:
//   - the eviction webhook: evicting a virt-launcher pod (label
//     kubevirt.io=virt-launcher; its VMI, in the same namespace, named by
//     annotation kubevirt.io/domain) on its VMI's node is refused with 429
//     when the VMI's eviction strategy is LiveMigrate or
//     LiveMigrateIfPossible and its LiveMigratable condition is True, which
//     also sets the VMI's status.evacuationNodeName to the pod's node (not
//     on a dry run); with LiveMigrate and not live-migratable it is refused
//     with 429 and nothing else happens; every other eviction is allowed;
//   - evacuation: a VMI with status.evacuationNodeName and no migration
//     running gets one: a VMIM named evacuation-<vmi>-<n>, annotated
//     kubevirt.io/evacuationMigration=<node>, and status.migrationState.
//     After MigrationDelay it completes (status.nodeName, the
//     kubevirt.io/nodeName label and the launcher pod move to the target;
//     evacuationNodeName is cleared) or, with FailMigrationAnnotation, fails;
//     while evacuationNodeName stays set, a failed migration is followed by
//     a new one after RetryDelay;
//   - the end of a VMI whose launcher pod is gone without a migration (its
//     eviction was allowed): phase Failed, as when its domain goes away;
//   - cancellation: deleting the VMIM before it completes aborts the
//     migration. If evacuationNodeName is still set, a new migration starts
//     after RetryDelay, as KubeVirt does (kubevirt/kubevirt#9585); clearing
//     it ends the evacuation.
//
// What it does not: there is no VM, no libvirt, virt-handler or
// virt-launcher, and no scheduling of a target pod. The target is the node
// the VMI's MigrationTargetAnnotation names, whether or not it could take
// the VM; without one the migration fails at once ("no target node").
// Migrations a user creates, migration policies, limits on parallel
// migrations and the KubeVirt CR are not emulated; Options.EvictionStrategy
// plays the CR's default eviction strategy.
type KubeVirtStandIn struct {
	tb     testing.TB
	o      KubeVirtStandInOptions
	client kubernetes.Interface
	dyn    dynamic.Interface

	stopped atomic.Bool // the test is over: report nothing more
	mu      sync.Mutex
	events  []string

	// The controller's state, touched by its goroutine only.
	active  map[types.UID]*standInMigration // by VMI UID
	retryAt map[types.UID]time.Time
	seq     map[string]int // VMIM name counter, by namespace/name
}

// KubeVirtStandInOptions tune a KubeVirtStandIn; the zero value is usable.
type KubeVirtStandInOptions struct {
	// MigrationDelay is how long a migration runs before it completes or
	// fails; 2s when zero.
	MigrationDelay time.Duration
	// RetryDelay is how long after a failed or aborted migration the next
	// one starts, if evacuationNodeName is still set; 5s when zero.
	RetryDelay time.Duration
	// EvictionStrategy applies to VMIs without spec.evictionStrategy, as
	// the KubeVirt CR's spec.configuration.evictionStrategy; "" is None.
	EvictionStrategy string
}

// The stand-in's resources, labels, annotations and names.
var (
	VMIResource  = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	VMIMResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstancemigrations"}
)

const (
	// MigrationTargetAnnotation on a VMI names the node its migrations go to.
	MigrationTargetAnnotation = "test.node-agent.io/migration-target"
	// FailMigrationAnnotation "true" on a VMI makes its migrations fail.
	FailMigrationAnnotation = "test.node-agent.io/fail-migration"
	// EvacuationMigrationAnnotation marks a VMIM made for an evacuation.
	EvacuationMigrationAnnotation = "kubevirt.io/evacuationMigration"
	// LauncherImage is the image of the stand-in's virt-launcher pods.
	LauncherImage = "registry.invalid/virt-launcher:standin"
	// KubeVirtWebhookName is the ValidatingWebhookConfiguration's name.
	KubeVirtWebhookName = "kubevirt-standin-eviction"

	standInTick    = 150 * time.Millisecond
	standInProbe   = "kubevirt-standin-probe" // a pod name the webhook answers 409 for
	vmiNodeLabel   = "kubevirt.io/nodeName"
	launcherLabel  = "kubevirt.io"
	domainAnnot    = "kubevirt.io/domain"
	createdByLabel = "kubevirt.io/created-by"
)

// standInMigration is a migration the controller runs.
type standInMigration struct {
	name, uid, source, target, started string
	began                              time.Time
}

// StartKubeVirtStandIn waits until env serves VMIs and VMIMs, starts the
// webhook and the controller, and returns once kube-apiserver calls the
// webhook. tb.Cleanup stops both and deletes the webhook configuration.
func StartKubeVirtStandIn(tb testing.TB, env *Env, o KubeVirtStandInOptions) *KubeVirtStandIn {
	tb.Helper()
	if o.MigrationDelay == 0 {
		o.MigrationDelay = 2 * time.Second
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 5 * time.Second
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		tb.Fatal(err)
	}
	k := &KubeVirtStandIn{tb: tb, o: o, client: env.Client(), dyn: dyn,
		active: map[types.UID]*standInMigration{}, retryAt: map[types.UID]time.Time{}, seq: map[string]int{}}
	WaitFor(tb, time.Minute, "kubevirt.io/v1 VMIs and VMIMs served", func() (bool, error) {
		for _, gvr := range []schema.GroupVersionResource{VMIResource, VMIMResource} {
			if _, err := dyn.Resource(gvr).List(tb.Context(), metav1.ListOptions{Limit: 1}); err != nil {
				return false, err
			}
		}
		return true, nil
	})

	certPEM, keyPEM, err := env.ServingCertificate([]net.IP{net.IPv4(127, 0, 0, 1)})
	cert, err2 := tls.X509KeyPair(certPEM, keyPEM)
	l, err3 := net.Listen("tcp", "127.0.0.1:0")
	if err := errors.Join(err, err2, err3); err != nil {
		tb.Fatalf("starting the stand-in's webhook server: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /evict", k.serveEvict)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() {
		if err := srv.ServeTLS(l, "", ""); !errors.Is(err, http.ErrServerClosed) {
			k.report(fmt.Errorf("webhook server: %w", err))
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(standInTick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				k.sync(ctx, time.Now())
			}
		}
	}()
	tb.Cleanup(func() {
		k.stopped.Store(true)
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		err := k.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(cctx, KubeVirtWebhookName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			tb.Logf("kubevirt stand-in: deleting webhook configuration: %v", err)
		}
		if srv.Shutdown(cctx) != nil {
			srv.Close()
		}
	})

	url := "https://" + l.Addr().String() + "/evict"
	whc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: KubeVirtWebhookName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "eviction.kubevirt-standin.test.node-agent.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: env.CAPEM()},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
			}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	if _, err := k.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(tb.Context(), whc, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("creating the stand-in's webhook configuration: %v", err)
	}
	// kube-apiserver picks webhook configurations up from a watch: probe
	// until it calls this one.
	WaitFor(tb, time.Minute, "kube-apiserver to call the stand-in's eviction webhook", func() (bool, error) {
		err := k.client.PolicyV1().Evictions(metav1.NamespaceDefault).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: standInProbe, Namespace: metav1.NamespaceDefault}})
		if err != nil && strings.Contains(err.Error(), standInProbe) {
			return true, nil
		}
		return false, fmt.Errorf("probe eviction answered %v", err)
	})
	return k
}

// Events lists what the stand-in did, in order, for example
// "evict vms/a: 429 evacuation", "evict vms/a: 429 not migratable",
// "evict vms/a: allowed", "migrate vms/a node-1->node-2 started", and the
// same with completed, failed or aborted ("node-1->" when no target).
func (k *KubeVirtStandIn) Events() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.events...)
}

func (k *KubeVirtStandIn) record(format string, args ...any) {
	ev := fmt.Sprintf(format, args...)
	k.mu.Lock()
	k.events = append(k.events, ev)
	k.mu.Unlock()
	if !k.stopped.Load() {
		k.tb.Logf("kubevirt stand-in: %s", ev)
	}
}

// report fails the test with err unless it is over; errors an apiserver
// restart or a conflicting write cause are only logged, and retried.
func (k *KubeVirtStandIn) report(err error) {
	if k.stopped.Load() {
		return
	}
	if apierrors.IsConflict(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) {
		k.tb.Logf("kubevirt stand-in (will retry): %v", err)
		return
	}
	k.tb.Errorf("kubevirt stand-in: %v", err)
}

// evictionVerdict is the webhook's answer to a launcher pod's eviction.
type evictionVerdict int

const (
	evictAllow    evictionVerdict = iota // the pod goes; the VM stops
	evictEvacuate                        // 429, and the VMI is evacuated
	evictRefuse                          // 429: it cannot migrate and must not stop
)

// verdictFor decides by the VMI's eviction strategy in force and whether
// it is live-migratable.
func verdictFor(strategy string, migratable bool) evictionVerdict {
	switch {
	case (strategy == "LiveMigrate" || strategy == "LiveMigrateIfPossible") && migratable:
		return evictEvacuate
	case strategy == "LiveMigrate":
		return evictRefuse
	}
	return evictAllow
}

func (k *KubeVirtStandIn) serveEvict(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*time.Second)
	defer cancel()
	resp := k.admit(ctx, review.Request)
	resp.UID = review.Request.UID
	review = admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

func (k *KubeVirtStandIn) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	deny := func(code int32, msg string) *admissionv1.AdmissionResponse {
		st := &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}
		if code == http.StatusTooManyRequests {
			st.Reason = metav1.StatusReasonTooManyRequests
		}
		return &admissionv1.AdmissionResponse{Result: st}
	}
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Name == standInProbe {
		return deny(http.StatusConflict, standInProbe)
	}
	pod, err := k.client.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil || pod.Labels[launcherLabel] != "virt-launcher" || pod.Annotations[domainAnnot] == "" {
		return allow // kube-apiserver answers for a missing pod itself
	}
	key := req.Namespace + "/" + pod.Annotations[domainAnnot]
	vmi, err := k.dyn.Resource(VMIResource).Namespace(req.Namespace).Get(ctx, pod.Annotations[domainAnnot], metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return allow
	} else if err != nil {
		k.report(fmt.Errorf("eviction of %s/%s: %w", req.Namespace, req.Name, err))
		return deny(http.StatusInternalServerError, err.Error())
	}
	if node, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName"); node != pod.Spec.NodeName {
		return allow // not the pod the VM runs in
	}
	strategy, _, _ := unstructured.NestedString(vmi.Object, "spec", "evictionStrategy")
	if strategy == "" {
		strategy = k.o.EvictionStrategy
	}
	switch verdictFor(strategy, liveMigratable(vmi)) {
	case evictEvacuate:
		if !ptr.Deref(req.DryRun, false) {
			patch := map[string]any{"status": map[string]any{"evacuationNodeName": pod.Spec.NodeName}}
			if err := k.patch(ctx, VMIResource, vmi.GetNamespace(), vmi.GetName(), patch, "status"); err != nil {
				k.report(fmt.Errorf("evacuating %s: %w", key, err))
				return deny(http.StatusInternalServerError, err.Error())
			}
		}
		k.record("evict %s: 429 evacuation", key)
		return deny(http.StatusTooManyRequests, "Eviction triggered evacuation of VMI "+key)
	case evictRefuse:
		k.record("evict %s: 429 not migratable", key)
		return deny(http.StatusTooManyRequests, "VMI "+key+" is configured with an eviction strategy but is not live-migratable")
	}
	k.record("evict %s: allowed", key)
	return allow
}

func liveMigratable(vmi *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(vmi.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "LiveMigratable" {
			return m["status"] == "True"
		}
	}
	return false
}

// patch merge-patches an object, or its subresource when one is named.
func (k *KubeVirtStandIn) patch(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, patch map[string]any, sub ...string) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = k.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}, sub...)
	return err
}

// sync takes one step of the controller for every VMI.
func (k *KubeVirtStandIn) sync(ctx context.Context, now time.Time) {
	list, err := k.dyn.Resource(VMIResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.report(fmt.Errorf("listing VMIs: %w", err))
		return
	}
	seen := map[types.UID]bool{}
	for i := range list.Items {
		vmi := &list.Items[i]
		seen[vmi.GetUID()] = true
		if err := k.step(ctx, vmi, now); err != nil && ctx.Err() == nil {
			k.report(fmt.Errorf("VMI %s/%s: %w", vmi.GetNamespace(), vmi.GetName(), err))
		}
	}
	for uid := range k.active {
		if !seen[uid] {
			delete(k.active, uid)
		}
	}
}

func (k *KubeVirtStandIn) step(ctx context.Context, vmi *unstructured.Unstructured, now time.Time) error {
	uid, ns, name := vmi.GetUID(), vmi.GetNamespace(), vmi.GetName()
	key := ns + "/" + name
	m := k.active[uid]
	if m == nil {
		evac, _, _ := unstructured.NestedString(vmi.Object, "status", "evacuationNodeName")
		if evac == "" {
			return k.endIfLauncherGone(ctx, vmi)
		}
		if now.Before(k.retryAt[uid]) {
			return nil
		}
		return k.start(ctx, vmi, evac, now)
	}
	route := fmt.Sprintf("migrate %s %s->%s", key, m.source, m.target)
	_, err := k.dyn.Resource(VMIMResource).Namespace(ns).Get(ctx, m.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if err := k.setState(ctx, ns, name, m, map[string]any{"failed": true, "failureReason": "aborted: migration object deleted", "endTimestamp": rfc3339(now)}, nil); err != nil {
			return err
		}
		delete(k.active, uid)
		k.retryAt[uid] = now.Add(k.o.RetryDelay)
		k.record("%s aborted", route)
		return nil
	case err != nil:
		return err
	case now.Sub(m.began) < k.o.MigrationDelay:
		return nil
	case vmi.GetAnnotations()[FailMigrationAnnotation] == "true":
		return k.fail(ctx, vmi, m, "stand-in: migration failed on request", now)
	}
	// As in KubeVirt, the VMI says the migration completed before the
	// source launcher pod goes: a drain that sees the pod gone finds the
	// VMI moved.
	if err := k.setPhase(ctx, ns, m.name, "Succeeded"); err != nil {
		return err
	}
	extra := map[string]any{"nodeName": m.target, "evacuationNodeName": nil}
	if err := k.setState(ctx, ns, name, m, map[string]any{"completed": true, "endTimestamp": rfc3339(now)}, extra); err != nil {
		return err
	}
	if err := k.patch(ctx, VMIResource, ns, name, map[string]any{"metadata": map[string]any{"labels": map[string]any{vmiNodeLabel: m.target}}}); err != nil {
		return err
	}
	if err := k.moveLauncher(ctx, vmi, m); err != nil {
		return err
	}
	delete(k.active, uid)
	k.record("%s completed", route)
	return nil
}

// endIfLauncherGone ends a Running VMI whose launcher pod is gone from its
// node (its eviction was allowed: strategy None, or not live-migratable
// under LiveMigrateIfPossible), as KubeVirt does when the domain goes away:
// phase Failed.
func (k *KubeVirtStandIn) endIfLauncherGone(ctx context.Context, vmi *unstructured.Unstructured) error {
	phase, _, _ := unstructured.NestedString(vmi.Object, "status", "phase")
	node, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	if phase != "Running" || node == "" {
		return nil
	}
	pods, err := k.client.CoreV1().Pods(vmi.GetNamespace()).List(ctx, metav1.ListOptions{
		LabelSelector: launcherLabel + "=virt-launcher", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Annotations[domainAnnot] == vmi.GetName() && p.DeletionTimestamp == nil {
			return nil
		}
	}
	if err := k.patch(ctx, VMIResource, vmi.GetNamespace(), vmi.GetName(), map[string]any{"status": map[string]any{"phase": "Failed"}}, "status"); err != nil {
		return err
	}
	k.record("stop %s/%s: launcher pod gone", vmi.GetNamespace(), vmi.GetName())
	return nil
}

// start creates the VMIM of a new evacuation migration and records it in
// the VMI's status.migrationState; with no target it fails at once.
func (k *KubeVirtStandIn) start(ctx context.Context, vmi *unstructured.Unstructured, evac string, now time.Time) error {
	ns, name := vmi.GetNamespace(), vmi.GetName()
	k.seq[ns+"/"+name]++
	vmim := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
		"metadata": map[string]any{"name": fmt.Sprintf("evacuation-%s-%d", name, k.seq[ns+"/"+name]), "namespace": ns,
			"annotations": map[string]any{EvacuationMigrationAnnotation: evac}},
		"spec": map[string]any{"vmiName": name},
	}}
	created, err := k.dyn.Resource(VMIMResource).Namespace(ns).Create(ctx, vmim, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // left by an earlier stand-in; the next tick takes the next name
	} else if err != nil {
		return err
	}
	source, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	m := &standInMigration{name: created.GetName(), uid: string(created.GetUID()), source: source,
		target: vmi.GetAnnotations()[MigrationTargetAnnotation], started: rfc3339(now), began: now}
	k.active[vmi.GetUID()] = m // from now on, step finishes it
	if err := k.setState(ctx, ns, name, m, nil, nil); err != nil {
		return err
	}
	k.record("migrate %s/%s %s->%s started", ns, name, m.source, m.target)
	if m.target == "" || m.target == source {
		return k.fail(ctx, vmi, m, "no target node", now)
	}
	return k.setPhase(ctx, ns, m.name, "Running")
}

// fail ends a migration as failed; the next starts after RetryDelay if
// evacuationNodeName is still set then.
func (k *KubeVirtStandIn) fail(ctx context.Context, vmi *unstructured.Unstructured, m *standInMigration, reason string, now time.Time) error {
	if err := k.setPhase(ctx, vmi.GetNamespace(), m.name, "Failed"); err != nil {
		return err
	}
	if err := k.setState(ctx, vmi.GetNamespace(), vmi.GetName(), m, map[string]any{"failed": true, "failureReason": reason, "endTimestamp": rfc3339(now)}, nil); err != nil {
		return err
	}
	delete(k.active, vmi.GetUID())
	k.retryAt[vmi.GetUID()] = now.Add(k.o.RetryDelay)
	k.record("migrate %s/%s %s->%s failed", vmi.GetNamespace(), vmi.GetName(), m.source, m.target)
	return nil
}

// migrationState is a VMI's status.migrationState for m with the given
// outcome fields, as a merge patch: every field it leaves unset is null, so
// nothing of an earlier migration's state survives.
func migrationState(m *standInMigration, outcome map[string]any) map[string]any {
	st := map[string]any{"sourceNode": m.source, "targetNode": nil, "startTimestamp": m.started, "migrationUid": m.uid,
		"endTimestamp": nil, "completed": nil, "failed": nil, "failureReason": nil}
	if m.target != "" {
		st["targetNode"] = m.target
	}
	maps.Copy(st, outcome)
	return st
}

// setState writes the VMI's status.migrationState, and the other status
// fields in extra.
func (k *KubeVirtStandIn) setState(ctx context.Context, ns, name string, m *standInMigration, outcome, extra map[string]any) error {
	status := map[string]any{"migrationState": migrationState(m, outcome)}
	maps.Copy(status, extra)
	return k.patch(ctx, VMIResource, ns, name, map[string]any{"status": status}, "status")
}

func (k *KubeVirtStandIn) setPhase(ctx context.Context, ns, vmim, phase string) error {
	err := k.patch(ctx, VMIMResource, ns, vmim, map[string]any{"status": map[string]any{"phase": phase}}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// moveLauncher makes sure the VMI has a launcher pod on the target node and
// none on the source node, copying the old pod's labels, annotations,
// owners and tolerations.
func (k *KubeVirtStandIn) moveLauncher(ctx context.Context, vmi *unstructured.Unstructured, m *standInMigration) error {
	pods := k.client.CoreV1().Pods(vmi.GetNamespace())
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: launcherLabel + "=virt-launcher"})
	if err != nil {
		return err
	}
	var old *corev1.Pod
	onTarget := false
	for i := range list.Items {
		p := &list.Items[i]
		if p.Annotations[domainAnnot] != vmi.GetName() {
			continue
		}
		switch p.Spec.NodeName {
		case m.source:
			old = p
		case m.target:
			onTarget = true
		}
	}
	if !onTarget {
		p := launcherPod(vmi, m.target)
		if old != nil {
			p.Labels, p.Annotations = maps.Clone(old.Labels), maps.Clone(old.Annotations)
			p.OwnerReferences, p.Spec.Tolerations = old.OwnerReferences, old.Spec.Tolerations
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if old != nil {
		err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// launcherPod is a virt-launcher pod of vmi on node, as KubeVirt makes
// them, less everything a real VM needs.
func launcherPod(vmi *unstructured.Unstructured, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "virt-launcher-" + vmi.GetName() + "-",
			Namespace:    vmi.GetNamespace(),
			Labels:       map[string]string{launcherLabel: "virt-launcher", createdByLabel: string(vmi.GetUID())},
			Annotations:  map[string]string{domainAnnot: vmi.GetName()},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance",
				Name: vmi.GetName(), UID: vmi.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{KwokToleration()},
			Containers:  []corev1.Container{{Name: "compute", Image: LauncherImage}},
		},
	}
}

// CreateVM creates a running VMI on node with its launcher pod, as
// KubeVirt would leave them: the VMI as CreateVMI makes it, the launcher pod
// created before the VMI's status says Running (the stand-in ends a Running
// VMI whose launcher is gone: endIfLauncherGone).
func (k *KubeVirtStandIn) CreateVM(ctx context.Context, tb testing.TB, ns, name, node string, spec map[string]any, migratable bool, annotations map[string]string) {
	tb.Helper()
	createVMI(ctx, tb, k.dyn, ns, name, node, spec, migratable, annotations, func(created *unstructured.Unstructured) {
		if _, err := k.client.CoreV1().Pods(ns).Create(ctx, launcherPod(created, node), metav1.CreateOptions{}); err != nil {
			tb.Fatalf("creating the launcher pod of VMI %s/%s: %v", ns, name, err)
		}
	})
}

// CreateVMI creates a running VMI on node, without a launcher pod, for
// tests that only read VMIs (no stand-in runs): the spec given (plus kwok's
// toleration unless it has tolerations), label kubevirt.io/nodeName, the
// annotations given, and a status with the node, phase Running and the
// LiveMigratable condition (False with reason DisksNotLiveMigratable unless
// migratable).
func CreateVMI(ctx context.Context, tb testing.TB, dyn dynamic.Interface, ns, name, node string, spec map[string]any, migratable bool, annotations map[string]string) {
	tb.Helper()
	createVMI(ctx, tb, dyn, ns, name, node, spec, migratable, annotations, nil)
}

// createVMI is CreateVMI, calling beforeRunning (when not nil) with the
// created VMI before its status is written.
func createVMI(ctx context.Context, tb testing.TB, dyn dynamic.Interface, ns, name, node string, spec map[string]any, migratable bool, annotations map[string]string, beforeRunning func(*unstructured.Unstructured)) {
	tb.Helper()
	spec = maps.Clone(spec)
	if spec == nil {
		spec = map[string]any{}
	}
	if _, ok := spec["tolerations"]; !ok {
		tol := KwokToleration()
		spec["tolerations"] = []any{map[string]any{"key": tol.Key, "operator": string(tol.Operator), "value": tol.Value, "effect": string(tol.Effect)}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{vmiNodeLabel: node}},
		"spec":     spec,
	}}
	u.SetAnnotations(annotations)
	vmis := dyn.Resource(VMIResource).Namespace(ns)
	created, err := vmis.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("creating VMI %s/%s: %v", ns, name, err)
	}
	if beforeRunning != nil {
		beforeRunning(created)
	}
	cond := map[string]any{"type": "LiveMigratable", "status": "True"}
	if !migratable {
		cond = map[string]any{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable", "message": "PVC disk is not shared"}
	}
	created.Object["status"] = map[string]any{"nodeName": node, "phase": "Running", "conditions": []any{cond}}
	if _, err = vmis.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		tb.Fatalf("setting the status of VMI %s/%s: %v", ns, name, err)
	}
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }
