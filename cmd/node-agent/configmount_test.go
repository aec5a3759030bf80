package main

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/test/testenv"
)

// TestConfigVolumesProjectOnlyTheConfigFile: the agent and the coordinator
// mount only the key config.yaml of node-agent-config (issue 40). Mounted
// whole, any key a ConfigMap writer adds (a kubeconfig with an exec
// credential plugin) would be a file in the pod, for a value of the config
// to name.
func TestConfigVolumesProjectOnlyTheConfigFile(t *testing.T) {
	objs := testenv.ReadDeployObjects(t)
	var ds appsv1.DaemonSet
	testenv.DeployObject(t, objs, "DaemonSet", deployNamespace, "node-agent", &ds)
	var dep appsv1.Deployment
	testenv.DeployObject(t, objs, "Deployment", deployNamespace, "node-agent-coordinator", &dep)
	for name, spec := range map[string]corev1.PodSpec{"DaemonSet node-agent": ds.Spec.Template.Spec, "Deployment node-agent-coordinator": dep.Spec.Template.Spec} {
		found := false
		for _, v := range spec.Volumes {
			if v.ConfigMap == nil || v.ConfigMap.Name != "node-agent-config" {
				continue
			}
			found = true
			if len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != "config.yaml" || v.ConfigMap.Items[0].Path != "config.yaml" {
				t.Errorf("%s: volume %s projects %+v of node-agent-config; want exactly the key config.yaml at config.yaml", name, v.Name, v.ConfigMap.Items)
			}
		}
		if !found {
			t.Errorf("%s mounts no node-agent-config", name)
		}
	}
}
