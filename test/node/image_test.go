package node

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// TestImageArchive checks the archive `make image` wrote: skopeo (the
// containers/image library podman load uses) reads it both as an OCI
// archive, with the digest make image printed, and as a docker save
// archive, as docker load reads it; and building the same tree again gives
// the same digest. ctr import, which `kind load image-archive` runs, is
// TestRealNode's own first step.
func TestImageArchive(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	summary, err := testenv.ReadImageSummary(filepath.Join(bin, testenv.ImageSummaryFile))
	requireOrSkip(t, err)
	_, err = exec.LookPath("skopeo")
	requireOrSkip(t, err)
	archive := filepath.Join(bin, "node-agent-image.tar")

	// index.json lists the image and its SBOM artifact: name the image.
	raw, err := exec.Command("skopeo", "inspect", "--raw", "oci-archive:"+archive+":"+tagOf(summary.Name)).Output()
	if err != nil {
		t.Fatalf("skopeo inspect --raw oci-archive: %v", err)
	}
	sum := sha256.Sum256(raw)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != summary.Digest {
		t.Errorf("the OCI archive's manifest has digest %s; make image printed %s", got, summary.Digest)
	}

	out, err := exec.Command("skopeo", "inspect", "--config", "docker-archive:"+archive).Output()
	if err != nil {
		t.Fatalf("skopeo inspect docker-archive: %v", err)
	}
	var cfg struct {
		Config struct {
			Entrypoint []string `json:"Entrypoint"`
			Cmd        []string `json:"Cmd"`
		} `json:"config"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/usr/local/bin/node-agent" || strings.Join(cfg.Config.Cmd, " ") != "run" {
		t.Errorf("docker archive's config: entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	// node-agent looks for its discovery helper beside itself;
	// deploy/coordinator.yaml runs the coordinator from the same image.
	top := topLayerModes(t, archive)
	for _, f := range []string{"usr/local/bin/node-agent", "usr/local/bin/node-agent-discover", "usr/local/bin/node-agent-coordinator"} {
		if mode, ok := top[f]; !ok || mode.Perm()&0o111 == 0 {
			t.Errorf("the image's top layer has no executable /%s (found: %v, mode %v)", f, ok, mode)
		}
	}

	// The same tree, built again into another directory, under the same
	// name and version: a file edited meanwhile outside the image (such as
	// the README) would otherwise turn the version into "-dirty".
	again := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack/image.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OUT_DIR="+again, "IMAGE="+summary.Name, "VERSION="+tagOf(summary.Name))
	began := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image.sh: %v\n%s", err, out)
	}
	second, err := testenv.ReadImageSummary(filepath.Join(again, testenv.ImageSummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if second.Digest != summary.Digest || second.Name != summary.Name {
		t.Errorf("two builds of the same tree differ: %s %s, then %s %s", summary.Name, summary.Digest, second.Name, second.Digest)
	}
	if second.SBOMDigest != summary.SBOMDigest || second.SBOMManifest != summary.SBOMManifest {
		t.Errorf("two builds of the same tree give two SBOMs: %s (artifact %s), then %s (artifact %s)",
			summary.SBOMDigest, summary.SBOMManifest, second.SBOMDigest, second.SBOMManifest)
	}
	checkSBOM(t, archive, summary)
	t.Logf("%s: %s twice (warm rebuild %s); archive %.1f MiB", summary.Name, summary.Digest, time.Since(began).Round(time.Second), float64(summary.ArchiveBytes)/(1<<20))
}

// topLayerModes lists the files of the top layer of the docker save archive
// at path, with their modes.
func topLayerModes(t *testing.T, path string) map[string]os.FileMode {
	t.Helper()
	var top string
	files := map[string]os.FileMode{}
	// manifest.json names the layers; a second pass reads the top one.
	for pass := 0; pass < 2; pass++ {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("reading %s: %v", path, err)
			}
			switch {
			case pass == 0 && h.Name == "manifest.json":
				var m []struct{ Layers []string }
				if err := json.NewDecoder(tr).Decode(&m); err != nil || len(m) != 1 || len(m[0].Layers) == 0 {
					t.Fatalf("manifest.json of %s: %v %+v", path, err, m)
				}
				top = m[0].Layers[len(m[0].Layers)-1]
			case pass == 1 && h.Name == top:
				gz, err := gzip.NewReader(tr)
				if err != nil {
					t.Fatalf("layer %s: %v", top, err)
				}
				lr := tar.NewReader(gz)
				for {
					lh, err := lr.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("layer %s: %v", top, err)
					}
					files[strings.TrimPrefix(lh.Name, "./")] = lh.FileInfo().Mode()
				}
				return files
			}
		}
		if top == "" {
			t.Fatalf("%s has no manifest.json", path)
		}
	}
	t.Fatalf("%s lacks its top layer %s", path, top)
	return nil
}

func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return ""
}
