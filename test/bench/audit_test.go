package bench

import (
	"fmt"
	"strings"

	"github.com/node-agent/node-agent/test/testenv"
)

// auditPolicy makes kube-apiserver log one event per request, when the request
// is received (stage RequestReceived), for every client the benchmark
// measures. Counting one stage only counts each request once, and counting at
// receipt counts a watch when it is opened, however long it then stays open.
//
// The rest of the control plane is left out: its requests are not what is
// measured, and writing them would add the audit log's own cost to both
// tools' drains. The one exception is kwok's deletion of pods, which marks
// when a drained pod is really gone. The agent runs as its ServiceAccount
// (deploy/), so that one is kept while the controllers' are left out; the
// policy sees who sent a request, not whom it impersonates, so the agent's
// requests as its node count too.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete"]
rules:
- level: Metadata
  users: [%[1]q]
  verbs: ["delete"]
  resources: [{group: "", resources: ["pods"]}]
- level: Metadata
  users: [%[2]q]
- level: None
  users: [%[1]q, "system:kube-scheduler", "system:kube-controller-manager", "system:apiserver"]
- level: None
  userGroups: ["system:serviceaccounts", "system:nodes"]
- level: Metadata
`, testenv.KwokUser, "system:serviceaccount:"+testenv.AgentNamespace+":"+testenv.AgentServiceAccount)

// requestKind names what a request did (testenv.AuditEvent.Kind).
func requestKind(e testenv.AuditEvent) string { return e.Kind() }

func isEviction(e testenv.AuditEvent) bool {
	return e.Verb == "create" && e.Resource() == "pods/eviction"
}

// isPodGone reports a pod deletion by kwok, the fake kubelet: with the
// pod/fast stages it deletes a terminating pod at once, so this is when an
// evicted pod disappears.
func isPodGone(e testenv.AuditEvent, namespace string) bool {
	return e.User.Username == testenv.KwokUser && e.Verb == "delete" && e.Resource() == "pods" && e.ObjectRef.Namespace == namespace
}

// The user agents of the measured clients. node-agent's run command sets
// "node-agent/<node>" and its maintenance CLI "node-agent-maintenance"
// (cmd/node-agent); node-agent-coordinator "node-agent-coordinator/<identity>"
// for its slot decisions (internal/runcoordinator), and client-go's default
// with "/node-agent-coordinator/leader-election" appended for its election,
// which is left out: it renews every 2 s whether nodes drain or not, a cost
// of the cluster, not of a drain. kubectl sends "kubectl/<version>
// (<os>/<arch>) ...".
const (
	agentUserAgentPrefix = "node-agent/"
	cliUserAgent         = "node-agent-maintenance"
	coordinatorUserAgent = testenv.CoordinatorName + "/" + coordinatorIdentity
	kubectlUserAgent     = "kubectl"
)

func isAgent(ua string) bool       { return strings.HasPrefix(ua, agentUserAgentPrefix) }
func isCLI(ua string) bool         { return ua == cliUserAgent }
func isCoordinator(ua string) bool { return ua == coordinatorUserAgent }

// isNodeAgent: every request a drain by node-agent costs, the
// coordinator's grant and release included.
func isNodeAgent(ua string) bool { return isAgent(ua) || isCLI(ua) || isCoordinator(ua) }
func isKubectl(ua string) bool   { return strings.HasPrefix(ua, kubectlUserAgent) }
