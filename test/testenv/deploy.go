package testenv

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// DeployFiles are the manifests deploy/kustomization.yaml lists.
var DeployFiles = []string{"daemonset.yaml", "rbac.yaml", "admission-policy.yaml", "configmap.yaml", "coordinator.yaml"}

// DeployDir is the repository's deploy/ directory.
func DeployDir(tb testing.TB) string {
	tb.Helper()
	root, err := RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(root, "deploy")
}

// DecodeObjects splits a multi-document YAML stream into objects.
func DecodeObjects(tb testing.TB, data []byte) []*unstructured.Unstructured {
	tb.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			tb.Fatal(err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// DeployObject finds kind/name among objs and converts it into out.
func DeployObject(tb testing.TB, objs []*unstructured.Unstructured, kind, namespace, name string, out any) {
	tb.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name && o.GetNamespace() == namespace {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				tb.Fatalf("%s %s/%s: %v", kind, namespace, name, err)
			}
			return
		}
	}
	tb.Fatalf("deploy/ has no %s %s/%s", kind, namespace, name)
}

// ReadDeployObjects reads the objects of DeployFiles.
func ReadDeployObjects(tb testing.TB) []*unstructured.Unstructured {
	tb.Helper()
	var objs []*unstructured.Unstructured
	for _, f := range DeployFiles {
		data, err := os.ReadFile(filepath.Join(DeployDir(tb), f))
		if err != nil {
			tb.Fatal(err)
		}
		objs = append(objs, DecodeObjects(tb, data)...)
	}
	return objs
}
