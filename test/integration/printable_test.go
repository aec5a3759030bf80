package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRebootGateAnswerReachesTheNodeOnlyPrintable is
// TestGateAnswerReachesTheNodeOnlyPrintable for the reboot controller's
// alert check and gates (pkg/reboot), which write the answer into the
// RebootRequired condition, the reboot record annotation and Events: a
// hostile Prometheus (a loopback server of the test's) answers every query
// with an alert name that holds a bidi override and a screen clear, and a
// value that sets the terminal's title. The Node then quotes it only as
// printable text.
func TestRebootGateAnswerReachesTheNodeOnlyPrintable(t *testing.T) {
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[`+
			`{"metric":{"alertname":"Evil\u202e\u001b[2J","note":"\u001b]0;pwned\u0007"},"value":[1700000000,"\u001b]0;pwned\u0007\u001b[2J"]}]}}`)
	}))
	t.Cleanup(hostile.Close)

	b := newDrainBed(t)
	c := b.env.Client()
	sentinel := filepath.Join(t.TempDir(), "reboot-required")
	if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, b.env, "node-1", "--reboot-enabled=true", "--reboot-sentinel-file="+sentinel,
		"--reboot-check-interval=1s", "--shutdown-enabled=false", "--reboot-prometheus-url="+hostile.URL,
		`--reboot-gates=[{"name":"hostile","query":"up == 0"}]`)
	agent.WaitReady(t)
	var message string
	testenv.WaitFor(t, time.Minute, "node-1's reboot held by the hostile Prometheus", func() (bool, error) {
		cond := rebootCondition(t, c, "node-1")
		if cond == nil || (cond.Reason != string(reboot.BlockedByAlerts) && cond.Reason != string(reboot.BlockedByGates)) {
			return false, nil
		}
		message = cond.Message
		return strings.Contains(cond.Message, "Evil"), nil
	})
	// The alert's name, escaped: the rune itself would fail the check
	// below, and this says the name reached the Node at all.
	if !strings.Contains(message, `Evil\u202e\x1b[2J`) {
		t.Errorf("the condition %q does not quote the alert's name, escaped", message)
	}
	node := getNode(t, c, "node-1")
	n := requireNodeTextsPrintable(t, c, node)
	t.Logf("RebootRequired: %s (%d annotations, conditions and Events checked)", message, n)
}

// requireNodeTextsPrintable fails t for any character that is not printable
// in node's annotations, its conditions' messages and the Events about it,
// as kubectl describe node prints them; it returns how many texts it
// checked.
func requireNodeTextsPrintable(t *testing.T, c kubernetes.Interface, node *corev1.Node) int {
	t.Helper()
	var texts []string
	for k, v := range node.Annotations {
		texts = append(texts, "annotation "+k+": "+v)
	}
	for _, cond := range node.Status.Conditions {
		texts = append(texts, "condition "+string(cond.Type)+": "+cond.Message)
	}
	evs, err := c.CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		texts = append(texts, "event "+e.Reason+": "+e.Message)
	}
	for _, s := range texts {
		for _, r := range s {
			if !unicode.IsPrint(r) {
				t.Errorf("%U in %q", r, s)
				break
			}
		}
	}
	return len(texts)
}
