package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Writer is who may set a configuration key. node-agent runs as root on every
// node with the host's system bus, so each key is read only from the place
// whose writers are trusted with what the key chooses (issue 40).
type Writer string

const (
	// WriterDaemonSet: the command line and environment of the DaemonSet's
	// pod (and of the coordinator's Deployment). Whoever may write those
	// already chooses the pod template, which is root on every node, so
	// nothing is given away by taking a key from there. A key that chooses
	// an identity, a credential, a path, a bus, a command or what the host
	// runs is taken from there only: a config file that sets it is refused.
	WriterDaemonSet Writer = "DaemonSet"
	// WriterConfigMap: the --config file, mounted from the ConfigMap
	// node-agent-config, which a namespace editor of node-agent (or a Role
	// on that one ConfigMap) may write. Such a key may also be given as a
	// flag, which wins over the file.
	WriterConfigMap Writer = "ConfigMap"
)

// Trust says who may set a key and the worst a hostile value can do.
type Trust struct {
	Writer Writer
	// Worst is the worst a hostile value can do, for the reference and the
	// refusal message; it is the reason for a WriterDaemonSet key.
	Worst string
}

// host and cm shorten the table below.
func host(worst string) Trust { return Trust{Writer: WriterDaemonSet, Worst: worst} }
func cm(worst string) Trust   { return Trust{Writer: WriterConfigMap, Worst: worst} }

// trust classifies every key of Config by its path, as KeyPaths gives it: a
// field of a list's elements is written list[].field. TestEveryKeyHasAWriter
// fails for a key missing here, so a new key cannot ship unclassified.
var trust = map[string]Trust{
	"kubeconfig":             host("choose the credential every agent uses and the server it is sent to: an exec credential plugin in a kubeconfig runs as root on every node, and a tokenFile sends each node's token to a server of the writer's choosing"),
	"nodeName":               host("choose the identity of every agent: which Node it believes it runs on, and so whose pods and labels it would change"),
	"metricsBindAddress":     host("choose what each pod listens on; the DaemonSet's ports name it, and its monitoring would go dark"),
	"healthProbeBindAddress": host("choose what each pod listens on; the DaemonSet's probes name it, so a wrong value restarts every agent for ever and leaves every node without its shutdown guard"),
	"logFormat":              cm("make the logs harder to read (text or json only)"),
	"logLevel":               cm("make the logs louder or quieter (debug, info, warn, error only)"),
	"kubeAPIQPS":             cm("make each agent send more requests to the apiserver, within the bound"),
	"kubeAPIBurst":           cm("make each agent send larger bursts of requests to the apiserver, within the bound"),
	"stateDir":               host("choose a host directory where the agent, as root, creates and writes files (the embedded libvirt's state)"),

	"labeller.enabled":           cm("stop CPU labelling, so that new VMs that need a CPU label do not schedule"),
	"labeller.libvirtURI":        host("choose which libvirt socket, bus or driver root the agent opens as root; a host libvirt's socket is as good as root on the host"),
	"labeller.virtType":          cm("label the CPU of the other domain type (kvm or qemu), so VMs schedule where they cannot run as asked"),
	"labeller.rediscoveryPeriod": cm("make discovery run more or less often, within the bound"),
	"labeller.discoveryTimeout":  cm("make discovery give up sooner or later, within the bound"),
	"labeller.kubeVirtCR":        cm("ignore the KubeVirt CR's CPU settings, so labels differ from KubeVirt's own labeller"),
	"labeller.minCPUModel":       cm("hide feature labels that VMs ask for, so they do not schedule"),
	"labeller.obsoleteCPUModels": cm("hide CPU model labels, so VMs that ask for those models do not schedule"),

	"drain.taintKey":                cm("taint draining nodes with another key, so KubeVirt does not migrate their VMs and the drain waits until drain.timeout"),
	"drain.podSelector":             cm("narrow the pods a maintenance evicts, so a node is called drained with pods left on it"),
	"drain.timeout":                 cm("make a drain give up sooner or hold its slot longer, within the bound"),
	"drain.onTimeout":               cm("leave a timed-out node cordoned, or uncordon it"),
	"drain.deleteAfter":             cm("delete pods whose eviction a PodDisruptionBudget refuses, after at least the bound"),
	"drain.nodeLifecycleConditions": cm("stop or start writing Kubernetes 1.37's node lifecycle conditions"),
	"drain.evictionAPI":             cm("choose pods/eviction or EvictionRequests, both within the node's own rights"),
	"drain.vmWithoutTarget":         cm("drain a node whose VMs cannot live-migrate (proceed), which stops those VMs"),
	"drain.parallelism":             cm("change how many evictions one node has in flight, within the bound"),
	"drain.podRules[].name":         cm("rename a rule in the drain's status and Events"),
	"drain.podRules[].namespaces":   cm("apply a rule to other namespaces' pods"),
	"drain.podRules[].podSelector":  cm("apply a rule to other pods"),
	"drain.podRules[].behavior":     cm("leave pods on a node called drained (Skip), or hold its drain until drain.timeout waiting for pods to complete (WaitCompleted)"),
	"drain.podRules[].order":        cm("evict pods in another order; a group that cannot leave holds the later groups until drain.timeout"),
	"drain.doNotDrainBound":         cm("let a pod's do-not-drain annotation hold the drain longer, within the bound (and drain.timeout), or honour none"),

	"slots.limit":                        cm("let more nodes drain at once, within the bound, or fewer"),
	"slots.namespace":                    cm("move the coordinator's election and slot Leases out of the one namespace its Role covers, so that no slot is granted and every maintenance waits, its status saying for what; no node's token gains a right by it"),
	"slots.pools[].name":                 cm("rename a pool in reasons and metrics"),
	"slots.pools[].selector":             cm("put nodes in or out of a pool, so that more of them drain at once"),
	"slots.pools[].limit":                cm("let more of a pool's nodes drain at once, within the bound"),
	"slots.pools[].maxUnavailable":       cm("let more of a pool's nodes be unavailable at once, within the bound"),
	"slots.pools[].maxUnhealthy":         cm("lift a pool's safety stop (100%), so that new slots are granted while many of its nodes are down or cordoned, or stop every new slot (0) while one is"),
	"slots.pools[].maxDomains":           cm("let more failure domains (zones) of a pool drain at once, within the bound, or remove the limit (0)"),
	"slots.pools[].topologyKey":          cm("count failure domains by another label, one that every node has a value of its own for (kubernetes.io/hostname), so that maxDomains limits only nodes"),
	"slots.pools[].gates[].name":         cm("name a gate"),
	"slots.pools[].gates[].query":        cm("add a health check whose answer keeps a node's slot after its maintenance, up to the pool's recoveryBound, then stops the pool"),
	"slots.pools[].gates[].beforeReboot": cm("nothing: beforeReboot is refused in slots.pools[].gates"),
	"slots.prometheusURL":                cm("ask the pools' gates of a Prometheus the writer runs, whose answers keep a node's slot up to the pool's recoveryBound, then stop the pool; it receives each gate's query, and no credential"),
	"slots.pools[].recoveryBound":        cm("hand a slot on as soon as its node gives it back, as before the key existed (0), or stop a pool sooner or later (within its bound) when a node does not come back healthy"),
	"slots.pools[].daemonSetNamespaces":  cm("count every namespace's DaemonSet pods (empty), so that a tenant's pod that never becomes Ready keeps a recovering node's slot up to the pool's recoveryBound, then stops the pool; or leave out the namespace of a DaemonSet the node needs, so that its slot is handed on before that pod is Ready"),
	"slots.heartbeatBound":               cm("keep the slot of a node whose heartbeat stopped longer, within the bound"),

	"maintenance.nodeMaintenance":      cm("serve or ignore NodeMaintenance objects"),
	"maintenance.prometheusURL":        cm("ask the gates of a Prometheus the writer runs, whose answers hold a maintenance until its gate bound; it receives each gate's query, and no credential"),
	"maintenance.gates[].name":         cm("name a gate"),
	"maintenance.gates[].query":        cm("add a gate whose answer holds every maintenance until its gate bound"),
	"maintenance.gateBound":            cm("let gates and VMs hold a maintenance longer, within the bound, or pass them over sooner"),
	"maintenance.hookBound":            cm("let hooks hold a maintenance longer, within the bound, or pass them over sooner"),
	"maintenance.onGateBound":          cm("drain past gates and VMs that cannot leave once the bound runs out (proceed), stopping such VMs"),
	"maintenance.gates[].beforeReboot": cm("nothing: beforeReboot is refused in maintenance.gates"),

	"shutdown.enabled":            cm("turn the shutdown guard off, so hosts shut down without draining first"),
	"shutdown.systemBusAddress":   host("choose the D-Bus bus the agent connects to as root and asks for locks and reloads"),
	"shutdown.drainBudget":        cm("make a shutdown wait longer for its drain, within the bound and logind's InhibitDelayMaxSec"),
	"shutdown.safetyMargin":       cm("release the shutdown lock sooner or later, within the bound"),
	"shutdown.manageLogindConfig": host("make the agent write a logind drop-in on the host and have systemd reload logind"),
	"shutdown.logindDropInDir":    host("choose a host directory where the agent writes a file as root"),

	"reboot.enabled":               cm("turn coordinated reboots on: a node whose host asks for a reboot (its sentinel) reboots, one drain slot at a time, inside the windows"),
	"reboot.sentinelFile":          host("choose which host path means \"reboot me\"; one that always exists (/etc/hostname) reboots every node in turn, for ever"),
	"reboot.sentinelCommand":       host("choose a program every host runs as root (a transient systemd unit)"),
	"reboot.window.days":           cm("move the reboot window to any day"),
	"reboot.window.start":          cm("move the reboot window to any time"),
	"reboot.window.end":            cm("move the reboot window to any time"),
	"reboot.window.timeZone":       cm("move the reboot window to any time zone"),
	"reboot.windows[].days":        cm("add reboot windows on any day"),
	"reboot.windows[].start":       cm("add reboot windows at any time"),
	"reboot.windows[].end":         cm("add reboot windows at any time"),
	"reboot.windows[].timeZone":    cm("add reboot windows in any time zone"),
	"reboot.exceptions[].from":     cm("add or remove days without reboots"),
	"reboot.exceptions[].to":       cm("add or remove days without reboots"),
	"reboot.exceptions[].timeZone": cm("shift days without reboots by a time zone"),
	"reboot.minInterval":           cm("space reboots more or less apart, within the bound"),
	"reboot.blockingPodSelector":   cm("let tenants' pods hold reboots, until the blocker bound"),
	"reboot.blockingPodNamespaces": cm("let the pods of every namespace hold reboots (empty), until the blocker bound"),
	"reboot.blockerBound":          cm("let blockers hold reboots longer, within the bound, or pass them over sooner"),
	"reboot.onBlockerBound":        cm("pass blockers over once the bound runs out (proceed), rebooting a node a guard still holds"),
	"reboot.prometheusURL":         cm("ask the alerts and gates of a Prometheus the writer runs, whose answers hold reboots until their bound; it receives each query, and no credential"),
	"reboot.gates[].name":          cm("name a gate"),
	"reboot.gates[].query":         cm("add a gate whose answer holds reboots until its bound"),
	"reboot.gates[].beforeReboot":  cm("hold a drained node before its reboot, up to reboot.beforeRebootBound"),
	"reboot.blockingAlertRegexp":   cm("choose which alerts hold reboots"),
	"reboot.rebootWithoutDrain":    cm("reboot nodes whose drain did not finish, which stops the pods left on them"),
	"reboot.preferNoScheduleTaint": cm("keep new pods off nodes that wait for a reboot (softly: PreferNoSchedule), or let them come"),
	"reboot.checkInterval":         cm("look for the sentinel more or less often, within the bound"),
	"reboot.slotHoldBound":         cm("keep a rebooting node's slot longer, within the bound"),
	"reboot.loopBound":             cm("allow a second reboot sooner after one that did not clear the sentinel, or turn that guard off"),
	"reboot.beforeRebootBound":     cm("hold a drained node longer before its reboot, within the bound"),

	"notifications.webhooks[].name":     cm("name a receiver"),
	"notifications.webhooks[].url":      cm("send what maintenance and reboots do on each node (node names, reasons) to any URL the pods reach; no credential is sent"),
	"notifications.webhooks[].urlFile":  host("choose a file the agent reads as root and uses as a URL, so its content (a token, a key) would be sent out in a request"),
	"notifications.webhooks[].preset":   cm("change a notification's format"),
	"notifications.webhooks[].template": cm("change a notification's text"),
	"notifications.webhooks[].events":   cm("choose which events a receiver is told of"),
	"notifications.timeout":             cm("give a receiver more or less time, within the bound"),
	"notifications.giveUpAfter":         cm("retry a receiver for longer or shorter, within the bound"),

	"silences.alertmanagerURL":    cm("make silences in an Alertmanager the writer runs, or in the cluster's; each silence names the node"),
	"silences.nodeLabel":          cm("silence by another alert label"),
	"silences.matchers[].name":    cm("widen or narrow which of a disrupted node's alerts are silenced; the node's own name is always a matcher"),
	"silences.matchers[].value":   cm("widen or narrow which of a disrupted node's alerts are silenced; the node's own name is always a matcher"),
	"silences.matchers[].isRegex": cm("widen or narrow which of a disrupted node's alerts are silenced; the node's own name is always a matcher"),
	"silences.matchers[].negate":  cm("widen or narrow which of a disrupted node's alerts are silenced; the node's own name is always a matcher"),
	"silences.duration":           cm("make a silence last longer past the disruption, within the bound"),
}

// TrustOf returns the class of the key at path (as KeyPaths writes it).
func TrustOf(path string) (Trust, bool) {
	t, ok := trust[path]
	return t, ok
}

// KeyPaths lists every key of Config, leaves only, in field order: sections
// are descended into (a Duration is a leaf), and so are the elements of a
// list of structs, whose fields are written list[].field.
func KeyPaths() []string {
	return keyPaths(reflect.TypeOf(Config{}), "")
}

func keyPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft.Name() != "Duration":
			out = append(out, keyPaths(ft, prefix+name+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, keyPaths(ft.Elem(), prefix+name+"[].")...)
		default:
			out = append(out, prefix+name)
		}
	}
	return out
}

// DaemonSetOnlyKeys lists the keys a config file may not set.
func DaemonSetOnlyKeys() []string {
	var out []string
	for _, p := range KeyPaths() {
		if trust[p].Writer == WriterDaemonSet {
			out = append(out, p)
		}
	}
	return out
}

// ErrDaemonSetOnlyKey is returned by Parse for a config file that sets a key
// taken only from the command line and the environment.
var ErrDaemonSetOnlyKey = errors.New("key taken only from the DaemonSet's arguments")

// daemonSetOnlyInFile refuses, in config file data (as JSON), every key
// classified WriterDaemonSet, whatever its value: even an empty one, since the
// file's writer would otherwise override what the DaemonSet's arguments say.
// The message names each key, says why, and where it belongs.
func daemonSetOnlyInFile(js []byte) error {
	var doc any
	if json.Unmarshal(js, &doc) != nil {
		return nil // the strict decode has said what is wrong
	}
	set := map[string]bool{}
	walkKeys(doc, "", func(path string) { set[path] = true })
	var found []string
	for _, p := range DaemonSetOnlyKeys() { // in field order, whatever the file's
		if set[p] {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		return nil
	}
	flags := flagOfPath()
	msgs := make([]string, len(found))
	for i, p := range found {
		msgs[i] = fmt.Sprintf("%s is taken only from the DaemonSet's arguments (%s), never from the config file, because whoever may write the ConfigMap could otherwise %s; remove it from the file",
			p, where(p, flags), trust[p].Worst)
	}
	return fmt.Errorf("%w: %s", ErrDaemonSetOnlyKey, strings.Join(msgs, "; "))
}

// walkKeys calls fn with the path of every key in doc, lists written [].
func walkKeys(doc any, prefix string, fn func(string)) {
	switch v := doc.(type) {
	case map[string]any:
		for k, sub := range v {
			fn(prefix + k)
			walkKeys(sub, prefix+k+".", fn)
		}
	case []any:
		for _, sub := range v {
			walkKeys(sub, strings.TrimSuffix(prefix, ".")+"[].", fn)
		}
	}
}

// flagOfPath maps each key with a flag to that flag.
func flagOfPath() map[string]string {
	out := map[string]string{}
	for _, k := range Keys() {
		out[k.Path] = k.Flag
	}
	return out
}

// where says where a DaemonSet-only key is set: its flag, or its list's
// flag, and the environment variable that stands for it.
func where(path string, flags map[string]string) string {
	if f, ok := flags[path]; ok {
		switch path {
		case "kubeconfig":
			return "--" + f + " or $KUBECONFIG"
		case "nodeName":
			return "--" + f + " or $NODE_NAME"
		}
		return "--" + f
	}
	if list, field, ok := strings.Cut(path, "[]."); ok {
		if f, ok := flags[list]; ok {
			return fmt.Sprintf("--%s, whose JSON entries may carry %s", f, field)
		}
	}
	return "a flag"
}

// WithoutDaemonSetOnly returns c with every DaemonSet-only key at its zero
// value: what a config file may describe of c. Keys inside lists
// (notifications.webhooks[].urlFile) are cleared in every element.
func (c Config) WithoutDaemonSetOnly() Config {
	v := reflect.ValueOf(&c).Elem()
	for _, p := range DaemonSetOnlyKeys() {
		clearPath(v, strings.Split(p, "."))
	}
	return c
}

func clearPath(v reflect.Value, parts []string) {
	name, list := strings.CutSuffix(parts[0], "[]")
	f := fieldByJSON(v, name)
	if !f.IsValid() {
		return
	}
	switch {
	case len(parts) == 1:
		f.SetZero()
	case list:
		if f.Len() > 0 {
			// A copy, so that c's list is not the caller's.
			cp := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(cp, f)
			f.Set(cp)
		}
		for i := range f.Len() {
			clearPath(f.Index(i), parts[1:])
		}
	default:
		clearPath(f, parts[1:])
	}
}

// fieldByJSON finds the field of struct v whose JSON name is name.
func fieldByJSON(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}
