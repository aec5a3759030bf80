package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// ModulePath is the module whose root the harness looks for when it has
	// to find bin/ and hack/tools/kwok on its own.
	ModulePath = "github.com/node-agent/node-agent"

	// BinDirEnv overrides where the control-plane binaries are looked up.
	BinDirEnv = "NODE_AGENT_BIN_DIR"
	// KubernetesVersionEnv is the default of Options.KubernetesVersion,
	// which `make test K8S_VERSION=...` sets for every test.
	KubernetesVersionEnv = "NODE_AGENT_K8S_VERSION"

	// IntegrationEnv, set to 1, turns a missing binary from a skip into a
	// failure. `make test` sets it so that CI cannot pass by skipping.
	IntegrationEnv = "NODE_AGENT_INTEGRATION"

	// PodStagesFast makes kwok move pods to Running at once and delete a
	// terminating pod at once, ignoring its grace period.
	PodStagesFast = "fast"
	// PodStagesGeneral walks pods through the usual phases (init containers,
	// ready) and deletes a terminating pod only when its deletionTimestamp is
	// reached, so grace periods are honoured.
	PodStagesGeneral = "general"

	defaultStartTimeout = 2 * time.Minute
)

// Binary names, as hack/build-tools.sh writes them into bin/.
const (
	BinEtcd                  = "etcd"
	BinKubeAPIServer         = "kube-apiserver"
	BinKubeControllerManager = "kube-controller-manager"
	BinKubeScheduler         = "kube-scheduler"
	BinKwok                  = "kwok"
	BinKubectl               = "kubectl"
)

// Options chooses which components run and where things live.
//
// etcd and kube-apiserver always run; Controllers, Scheduler and Kwok add the
// other components. DefaultOptions turns all of them on, which is what most
// tests want; a test that only needs the API (for example to watch a Node)
// starts faster with Options{}.
type Options struct {
	// BinDir holds the binaries. Default: $NODE_AGENT_BIN_DIR, else bin/ at
	// the root of the node-agent module found by walking up from the working
	// directory.
	BinDir string
	// KubernetesVersion, when set (for example NextKubernetesVersion),
	// runs kube-apiserver, kube-controller-manager and kube-scheduler of
	// that release, from BinDir/k8s-<version>/ (hack/build-tools.sh
	// next-control-plane); etcd, kwok and kubectl stay those of BinDir.
	// Default: $NODE_AGENT_K8S_VERSION, else the release of BinDir.
	KubernetesVersion string

	// Controllers runs kube-controller-manager. Without it there are no
	// ReplicaSets' pods, no PodDisruptionBudget status, no garbage
	// collection and no default ServiceAccounts.
	Controllers bool
	// Scheduler runs kube-scheduler. Without it pods stay Pending unless
	// they name their node.
	Scheduler bool
	// Kwok runs kwok as the kubelet of every Node AddNode creates. Without
	// it Nodes never become Ready and pods never run.
	Kwok bool

	// PodStages picks the kwok pod lifecycle: PodStagesFast (default) or
	// PodStagesGeneral.
	PodStages string
	// KwokModuleDir is the directory of the sigs.k8s.io/kwok module whose
	// kustomize/stage/ files are loaded. Default: asked of the go command in
	// <repo>/hack/tools/kwok, so the stages always match the pinned binary.
	KwokModuleDir string

	// WorkDir receives certificates, kubeconfigs and etcd data. Default: a
	// new temporary directory, removed by Stop.
	WorkDir string
	// LogDir receives one <component>.log per process. Default: WorkDir/logs.
	// A LogDir given here is kept after Stop.
	LogDir string

	// StartTimeout bounds each readiness wait. Default: 2 minutes, which is
	// generous for a cold start on a loaded 2-core machine.
	StartTimeout time.Duration

	// APIServerArgs are appended to the kube-apiserver command line, for
	// example to turn on an audit log. A repeated flag overrides the default.
	APIServerArgs []string
	// ControllerManagerArgs are appended to the kube-controller-manager
	// command line.
	ControllerManagerArgs []string

	// Logger receives progress messages. Default: discard.
	Logger *slog.Logger
}

// DefaultOptions runs the whole control plane: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok with the fast pod stages.
func DefaultOptions() Options {
	return Options{Controllers: true, Scheduler: true, Kwok: true, PodStages: PodStagesFast}
}

func (o Options) withDefaults() (Options, error) {
	if o.BinDir == "" {
		o.BinDir = os.Getenv(BinDirEnv)
	}
	if o.BinDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return o, fmt.Errorf("finding bin/: %w; set Options.BinDir or $%s", err, BinDirEnv)
		}
		o.BinDir = filepath.Join(root, "bin")
	}
	if o.KubernetesVersion == "" {
		o.KubernetesVersion = os.Getenv(KubernetesVersionEnv)
	}
	abs, err := filepath.Abs(o.BinDir)
	if err != nil {
		return o, err
	}
	o.BinDir = abs
	switch o.PodStages {
	case "":
		o.PodStages = PodStagesFast
	case PodStagesFast, PodStagesGeneral:
	default:
		return o, fmt.Errorf("unknown kwok pod stages %q: use %q or %q", o.PodStages, PodStagesFast, PodStagesGeneral)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = defaultStartTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// binaries lists the executables the chosen components need.
func (o Options) binaries() []string {
	bins := []string{BinEtcd, BinKubeAPIServer}
	if o.Controllers {
		bins = append(bins, BinKubeControllerManager)
	}
	if o.Scheduler {
		bins = append(bins, BinKubeScheduler)
	}
	if o.Kwok {
		bins = append(bins, BinKwok)
	}
	return bins
}

// NextKubernetesVersion is the newer release hack/build-tools.sh builds a
// control plane of beside the default one, for the tests of its APIs.
const NextKubernetesVersion = "v1.37.2"

// binPath is where the binary name is: the control plane's of
// KubernetesVersion in its own directory, the rest in BinDir.
func (o Options) binPath(name string) string {
	switch name {
	case BinKubeAPIServer, BinKubeControllerManager, BinKubeScheduler:
		if o.KubernetesVersion != "" {
			return filepath.Join(o.BinDir, "k8s-"+o.KubernetesVersion, name)
		}
	}
	return filepath.Join(o.BinDir, name)
}

// MissingBinariesError says which control-plane binaries are absent.
type MissingBinariesError struct {
	BinDir  string
	Missing []string
}

func (e *MissingBinariesError) Error() string {
	return fmt.Sprintf("control-plane binaries missing from %s: %s; run `make tools` to build them (hack/build-tools.sh)",
		e.BinDir, strings.Join(e.Missing, ", "))
}

// CheckBinaries returns a *MissingBinariesError naming every binary the
// options need that is not an executable file in the bin directory, and nil
// when all are there. Extra names (for example BinKubectl) are checked too.
func CheckBinaries(opts Options, extra ...string) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	var missing []string
	for _, name := range append(o.binaries(), extra...) {
		if path := o.binPath(name); !isExecutable(path) {
			rel, err := filepath.Rel(o.BinDir, path)
			if err != nil {
				rel = path
			}
			missing = append(missing, rel)
		}
	}
	if len(missing) > 0 {
		return &MissingBinariesError{BinDir: o.BinDir, Missing: missing}
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// RepoRoot walks up from the working directory to the go.mod of the
// node-agent module. Tests run in their package directory and the demo in the
// repository root, so both find it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module " + ModulePath + " above the working directory")
		}
		dir = parent
	}
}

func isModuleRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}
