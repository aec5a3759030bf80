package maintenancecli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func TestWriteHooks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status string
		want   []string
	}{
		{name: "no maintenance", want: []string{"pre-drain hooks (hold the next drain before the cordon): backup (velero)",
			"post-drain hooks (will hold the maintenance once its pods are gone): empty; fw (", "x1b[31m)", "malformed, holds all the same: annotation post-drain.hook.node-agent.io/empty has no value"}},
		{name: "drained", status: `{"phase":"Succeeded","trigger":"annotation","lastUpdate":"2026-01-01T00:00:00Z"}`,
			want: []string{"pre-drain hooks (hold nothing now: this drain has begun)", "post-drain hooks (hold this drained maintenance: it is not done (at most maintenance.hookBound from 2026-01-01T00:00:00Z)): empty; fw"}},
		{name: "waiting", status: `{"phase":"Waiting","trigger":"annotation"}`, want: []string{"pre-drain hooks (hold this drain before the cordon): backup (velero)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
				"pre-drain.hook.node-agent.io/backup": "velero", "post-drain.hook.node-agent.io/fw": "\x1b[31m", "post-drain.hook.node-agent.io/empty": ""}}}
			if tc.status != "" {
				n.Annotations[selfdrain.StatusAnnotation] = tc.status
			}
			var b strings.Builder
			if err := writeHooks(&b, n); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output\n%s\nwant a line with %q", b.String(), w)
				}
			}
		})
	}
	var b strings.Builder
	if err := writeHooks(&b, &corev1.Node{}); err != nil || b.Len() != 0 {
		t.Errorf("no hooks: %q, %v; want nothing", b.String(), err)
	}
}
