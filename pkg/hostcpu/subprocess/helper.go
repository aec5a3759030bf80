package subprocess

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// HelperName is the discovery helper's file name. It is built from
// cmd/node-agent-discover beside node-agent (`make build` writes both to
// bin/, the image has both in /usr/local/bin), and it is the only binary of
// node-agent that links libvirt.
const HelperName = "node-agent-discover"

// HelperEnv names the discovery helper's path for a node-agent that does not
// sit beside it, as under `go run`.
const HelperEnv = "NODE_AGENT_DISCOVERY_HELPER"

// FindHelper returns the discovery helper's path: $NODE_AGENT_DISCOVERY_HELPER,
// or else HelperName in the directory of the running executable. It fails,
// naming the path it tried, when no executable file is there.
func FindHelper() (string, error) {
	path := os.Getenv(HelperEnv)
	how := "$" + HelperEnv
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the discovery helper %s beside this executable: %w; set $%s to its path", HelperName, err, HelperEnv)
		}
		path = filepath.Join(filepath.Dir(self), HelperName)
		how = "beside " + self
	}
	fi, err := os.Stat(path)
	var problem string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		problem = "no such file"
	case err != nil:
		problem = err.Error()
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		problem = "not an executable file"
	default:
		return path, nil
	}
	return "", fmt.Errorf("discovery helper %s (%s): %s; it ships beside node-agent (`make build` builds both), or set $%s to its path", path, how, problem, HelperEnv)
}
