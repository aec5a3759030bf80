package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// libvirtPackages name what loads libvirt: the maintained binding and
// node-agent's package over it.
var libvirtPackages = []string{
	"libvirt.org/go/libvirt",
	"github.com/node-agent/node-agent/pkg/hostcpu/libvirt",
}

// TestLinksNoLibvirt holds issue 21's split: the daemon links no libvirt
// package, so it never maps libvirt's libraries, and the discovery helper is
// where libvirt.org/go/libvirt is linked. It asks the go command for each
// binary's dependencies, with the tags `make build` uses.
func TestLinksNoLibvirt(t *testing.T) {
	for _, tags := range []string{"libvirt_dlopen", ""} {
		t.Run("tags="+tags, func(t *testing.T) {
			for _, p := range deps(t, tags, "github.com/node-agent/node-agent/cmd/node-agent") {
				for _, l := range libvirtPackages {
					if strings.Contains(p, l) {
						t.Errorf("node-agent links %s; libvirt belongs in the discovery helper (cmd/node-agent-discover) only", p)
					}
				}
			}
			helper := deps(t, tags, "github.com/node-agent/node-agent/cmd/node-agent-discover")
			for _, l := range libvirtPackages {
				if !slices.Contains(helper, l) {
					t.Errorf("node-agent-discover does not link %s; its dependencies: %v", l, helper)
				}
			}
		})
	}
}

// deps lists pkg and every package it imports, as `go list -deps` does.
func deps(t *testing.T, tags, pkg string) []string {
	t.Helper()
	args := []string{"list", "-deps"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, stderr.String())
	}
	list := strings.Fields(string(out))
	if !slices.Contains(list, pkg) {
		t.Fatalf("go list -deps %s does not list the package itself: %v", pkg, list)
	}
	return list
}

// TestConfigImportsNoComponent holds pkg/config below the packages it
// configures: of node-agent's own packages it imports only pkg/reboot/policy,
// which parses the reboot keys for both config's validation and the
// coordinator, and the spec packages of settings whose values another
// package owns (pkg/notify/spec, what a webhook may be configured with;
// pkg/evictionrequest/spec, pkg/nodelifecycle/spec and pkg/vmdrain/spec,
// their modes), with pkg/enum, which parses those modes and imports nothing
// of Kubernetes.
// Importing pkg/reboot for that pulled the coordinator, pkg/agent and the
// Kubernetes clients into config and everything that reads it.
func TestConfigImportsNoComponent(t *testing.T) {
	const module = "github.com/node-agent/node-agent/"
	allowed := []string{module + "pkg/config", module + "pkg/reboot/policy", module + "pkg/notify/spec",
		module + "pkg/evictionrequest/spec", module + "pkg/nodelifecycle/spec", module + "pkg/vmdrain/spec", module + "pkg/enum"}
	for _, p := range deps(t, "libvirt_dlopen", module+"pkg/config") {
		if strings.HasPrefix(p, module) && !slices.Contains(allowed, p) {
			t.Errorf("pkg/config imports %s; it may import only %v of node-agent's packages", p, allowed[1:])
		}
	}
}

// clientsetPackages are what only node-agent-coordinator links: client-go's
// scheme of every API group (through its typed clientset) and its leader
// election.
var clientsetPackages = []string{
	"k8s.io/client-go/kubernetes/scheme",
	"k8s.io/client-go/tools/leaderelection",
}

// TestLinksNoClientset holds the agent's footprint: leader election and the
// clientset's scheme of every API group belong to node-agent-coordinator
// (pkg/slots/election), which needs them; the agent, which runs on every
// node, links neither.
func TestLinksNoClientset(t *testing.T) {
	agent := deps(t, "libvirt_dlopen", "github.com/node-agent/node-agent/cmd/node-agent")
	for _, p := range clientsetPackages {
		if slices.Contains(agent, p) {
			t.Errorf("node-agent links %s; only node-agent-coordinator may", p)
		}
	}
	coordinator := deps(t, "libvirt_dlopen", "github.com/node-agent/node-agent/cmd/node-agent-coordinator")
	for _, p := range clientsetPackages {
		if !slices.Contains(coordinator, p) {
			t.Errorf("node-agent-coordinator does not link %s; the check would hold for nothing", p)
		}
	}
}
