package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ImageSummaryFile is the file hack/image.sh (`make image`) writes beside
// the image archive: KEY=VALUE lines naming the image and its parts.
const ImageSummaryFile = "node-agent-image.txt"

// ImageSummary is what `make image` recorded about the image it built.
type ImageSummary struct {
	Name, Digest string
	ArchiveBytes int64
	// The SBOM: its file, its digest and its artifact manifest's.
	SBOMPath, SBOMDigest, SBOMManifest string
	// BaseDir is the base layer as a directory (the cached Debian root
	// filesystem with libvirt and QEMU), LayerDir the top layer (node-agent's
	// binaries under usr/local/bin). Empty in a summary written before
	// hack/image.sh recorded them.
	BaseDir, LayerDir string
}

// BinDir is $NODE_AGENT_BIN_DIR, or bin/ of the repository: where the
// control-plane binaries and `make image`'s output are.
func BinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("finding bin/: %w; set $%s", err, BinDirEnv)
	}
	return filepath.Join(root, "bin"), nil
}

// ReadImageSummary reads the summary `make image` wrote at path.
func ReadImageSummary(path string) (ImageSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return ImageSummary{}, fmt.Errorf("node-agent's image: %w; run `make image`", err)
	}
	defer f.Close()
	var s ImageSummary
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "name":
			s.Name = v
		case "digest":
			s.Digest = v
		case "archive_bytes":
			s.ArchiveBytes, _ = strconv.ParseInt(v, 10, 64)
		case "sbom_path":
			s.SBOMPath = v
		case "sbom_digest":
			s.SBOMDigest = v
		case "sbom_manifest":
			s.SBOMManifest = v
		case "base_dir":
			s.BaseDir = v
		case "layer_dir":
			s.LayerDir = v
		}
	}
	if s.Name == "" {
		return s, fmt.Errorf("%s names no image; run `make image`", path)
	}
	return s, sc.Err()
}

// RequireImageRootfs returns the summary of the image in BinDir, or skips
// the test (fails it with $NODE_AGENT_INTEGRATION=1 or $NODE_AGENT_E2E=1)
// when a Container cannot run the image's programs in its root filesystem:
// no root, no systemd-nspawn, no image, or an image whose layers are not
// there as directories.
func RequireImageRootfs(t testing.TB) ImageSummary {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (systemd-nspawn and overlay mounts need it)")
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		missing = append(missing, "systemd-nspawn (run hack/install-deps.sh nspawn)")
	}
	var s ImageSummary
	bin, err := BinDir()
	if err == nil {
		s, err = ReadImageSummary(filepath.Join(bin, ImageSummaryFile))
	}
	switch {
	case err != nil:
		missing = append(missing, err.Error())
	case s.BaseDir == "" || s.LayerDir == "":
		missing = append(missing, fmt.Sprintf("the directories of the image's layers: %s names none; run `make image` again", filepath.Join(bin, ImageSummaryFile)))
	default:
		for _, p := range []string{filepath.Join(s.BaseDir, "usr/bin/virsh"), filepath.Join(s.LayerDir, "usr/local/bin/node-agent")} {
			if _, err := os.Stat(p); err != nil {
				missing = append(missing, fmt.Sprintf("%s (run `make image`)", p))
			}
		}
	}
	if len(missing) > 0 {
		skipOrFail(t, "image prerequisites missing: "+strings.Join(missing, "; "), IntegrationEnv, E2EEnv)
	}
	return s
}

// skipOrFail skips the test with msg, or fails it when any of envs is 1:
// `make test` sets them, so a missing prerequisite cannot pass CI as a skip.
func skipOrFail(t testing.TB, msg string, envs ...string) {
	t.Helper()
	for _, env := range envs {
		if os.Getenv(env) == "1" {
			t.Fatalf("%s (a failure, not a skip, because %s=1)", msg, env)
		}
	}
	t.Skipf("%s (set %s=1 to fail instead of skipping)", msg, strings.Join(envs, "=1 or "))
}

// NewImageContainer prepares a Container whose root is the image's own:
// the base layer as the overlay's read-only lower layer and the top layer's
// usr/local/bin bound read-only over /usr/local/bin, so Container.Run runs
// the binaries the image ships on the libvirt and QEMU it ships. The
// container sees /dev/kvm only with kvm set. Call RequireImageRootfs first.
func NewImageContainer(t testing.TB, img ImageSummary, kvm bool) *Container {
	t.Helper()
	binds := []Bind{{Host: filepath.Join(img.LayerDir, "usr/local/bin"), Container: "/usr/local/bin", ReadOnly: true}}
	if kvm {
		binds = append(binds, Bind{Host: "/dev/kvm", Container: "/dev/kvm"})
	}
	return NewContainer(t, ContainerOptions{Rootfs: img.BaseDir, Binds: binds})
}

// ImageLabels runs `node-agent labels -o json` with args in c (see
// NewImageContainer) and returns the labels and its stderr: the sources it
// used and what it left out.
func ImageLabels(ctx context.Context, c *Container, args ...string) (map[string]string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd := c.Run(ctx, append([]string{"/usr/local/bin/node-agent", "labels", "-o", "json"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, stderr.String(), fmt.Errorf("node-agent labels in the image: %w\n%s", err, stderr.Bytes())
	}
	var labels map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &labels); err != nil {
		return nil, stderr.String(), fmt.Errorf("node-agent labels -o json in the image: %w\n%s", err, stdout.Bytes())
	}
	return labels, strings.TrimSpace(stderr.String()), nil
}
