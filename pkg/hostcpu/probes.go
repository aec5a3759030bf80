package hostcpu

import (
	"net/url"
	"path/filepath"
	"strings"
)

// EmbedRoot returns the directory of the embedded QEMU driver that uri (or,
// for AutoURI, the state directory) uses, or "" when uri is not embedded.
func EmbedRoot(uri, stateDir string) string {
	if uri == "" || uri == AutoURI {
		if stateDir == "" {
			return ""
		}
		root, err := filepath.Abs(filepath.Join(stateDir, "libvirt"))
		if err != nil {
			return ""
		}
		return root
	}
	u, err := url.Parse(uri)
	if err != nil || !strings.HasPrefix(u.Scheme, "qemu") || u.Path != "/embed" {
		return ""
	}
	return u.Query().Get("root")
}
