package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/labeller"
)

type labelsOptions struct {
	cfg        config.Config
	client     clientFlags
	configFile string
	output     string
	domCaps    string
	caps       string
	features   string
	cpuMap     string
	verbose    bool
}

func newLabelsCommand() *cobra.Command {
	o := &labelsOptions{cfg: config.Default()}
	cmd := &cobra.Command{
		Use:   "labels",
		Short: "Print the CPU labels this host would get",
		Long: `Print the CPU labels this host would get from "node-agent run", with no
cluster needed: the same discovery and the same label policy, with KubeVirt's
label keys.

Discovery reads cpuid and asks libvirt (--libvirt-uri) for the domain
capabilities, the host capabilities and the hypervisor-supported features
(what "virsh domcapabilities | virsh hypervisor-cpu-baseline --features"
prints). When libvirt is unreachable, the cpu-feature and cpu-vendor labels
come from cpuid alone, the command still succeeds, and it lists the labels it
left out and why.

--domcapabilities, --capabilities and --supported-features describe a host
with saved files, as KubeVirt's own pipeline does (virsh domcapabilities,
virsh capabilities, virsh hypervisor-cpu-baseline --features). Given any of
them, nothing of this machine is read: no cpuid, no libvirt, no /dev/kvm, no
sysctl, so another host's files are never mixed with this one. What no file
gives is listed as left out. --cpu-map only supplies libvirt's model
definitions (to expand the host model and --min-cpu-model) and mixes nothing;
with files and without it, this machine's installed cpu_map is not read
either, and cpu-feature is left out unless --supported-features gives it.

--min-cpu-model (default Penryn) subtracts that model's features from the
cpu-feature and host-model-required-features labels. KubeVirt's own labeller
stopped subtracting in 2022 (kubevirt/kubevirt#7765) and labels every
supported feature; pass --min-cpu-model "" to do the same, and to compare with
it. With a model set, a feature the model has gets no label: a VM needing it
cannot select for it, and may migrate to a node lacking it with nothing in the
labels to say why.

The KubeVirt CR: "node-agent run" follows the KubeVirt CR of its cluster
(--kubevirt-cr auto): its obsoleteCPUModels replace the built-in list and --obsolete-cpu-models,
no minimum CPU model is subtracted, and its CrossArchitectureVirtualization
feature gate adds the kubevirt.io/vm-arch-* labels. This command needs no
cluster and reads the CR only when given one, with --kubeconfig or --context;
the output says which settings applied.

Output: -o table (the default) groups the labels by prefix and ends with the
sources used; -o json and -o yaml print a flat label map on stdout and the
sources on stderr.`,
		Example: `  # This host, through qemu:///system or the embedded QEMU driver:
  node-agent labels

  # A throw-away embedded libvirt, comparable with
  # virsh -c 'qemu:///embed?root=/tmp/x' domcapabilities --virttype qemu:
  node-agent labels -o json --libvirt-uri 'qemu:///embed?root=/tmp/x' --virt-type qemu

  # Another host's saved output, labelled as KubeVirt's labeller would:
  node-agent labels --min-cpu-model "" --domcapabilities dc.xml \
      --capabilities caps.xml --supported-features supported_features.xml

  # This host, with the settings of the KubeVirt CR of a cluster:
  node-agent labels --kubeconfig ~/.kube/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	fs := cmd.Flags()
	o.cfg.AddLabellerFlags(fs)
	// Discovery runs once here; the period only matters to `run`.
	_ = fs.MarkHidden("rediscovery-period")
	fs.StringVar(&o.configFile, "config", "", "Configuration `file` of node-agent run; its labeller keys and stateDir apply, and flags given explicitly win.")
	fs.StringVarP(&o.output, "output", "o", "table", "Output `format`: table, json or yaml.")
	fs.StringVar(&o.domCaps, "domcapabilities", "", "Read the domain capabilities from this `file` (saved with virsh domcapabilities) instead of libvirt.")
	fs.StringVar(&o.caps, "capabilities", "", "Read the host capabilities from this `file` (saved with virsh capabilities) instead of libvirt.")
	fs.StringVar(&o.features, "supported-features", "", "Read the hypervisor-supported features from this `file` (saved with virsh hypervisor-cpu-baseline --features, KubeVirt's supported_features.xml) instead of libvirt.")
	fs.StringVar(&o.cpuMap, "cpu-map", "", "Expand CPU models from this libvirt cpu_map `directory` instead of libvirt, following <model name=.../> ancestry.")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "Log each discovery step to stderr.")
	o.client.add(fs)
	return cmd
}

func (o *labelsOptions) run(cmd *cobra.Command) error {
	// Checked before discovery, which takes a while.
	switch o.output {
	case labeller.FormatTable, labeller.FormatJSON, labeller.FormatYAML:
	default:
		return fmt.Errorf("--output %q: must be table, json or yaml", o.output)
	}
	cfg := o.cfg
	if o.configFile != "" {
		var err error
		// Only the labeller keys count here, and no old key is one:
		// the agent warns of old keys, not this command.
		if cfg, _, err = config.Load(o.configFile, config.Default(), cmd.Flags()); err != nil {
			return err
		}
	}
	if err := cfg.Labeller.Validate(); err != nil {
		return err
	}

	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))

	policy := labeller.Policy{MinCPUModel: cfg.Labeller.MinCPUModel, ObsoleteCPUModels: cfg.Labeller.ObsoleteCPUModels}
	if err := o.readKubeVirt(cmd, cfg.Labeller, &policy); err != nil {
		return err
	}
	opts := hostcpu.Options{
		LibvirtURI:             cfg.Labeller.LibvirtURI,
		StateDir:               cfg.StateDir,
		VirtType:               cfg.Labeller.VirtType,
		DomainCapabilitiesFile: o.domCaps,
		CapabilitiesFile:       o.caps,
		SupportedFeaturesFile:  o.features,
		CPUMapDir:              o.cpuMap,
		ExpandModels:           policy.ExpandModels(),
		Logger:                 log,
	}
	h, err := discoverForLabels(cmd.Context(), opts, cfg.Labeller, level, cmd.ErrOrStderr())
	if err != nil {
		return fmt.Errorf("discovering the host CPU: %w", err)
	}
	res, err := policy.Labels(h)
	if err != nil {
		return err
	}
	return labeller.Report{Host: h, Policy: policy, Result: res}.Write(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.output)
}

// readKubeVirt puts the KubeVirt CR's settings into policy, from the cluster
// --kubeconfig or --context names; with neither, no cluster is contacted and
// the policy's note says so.
func (o *labelsOptions) readKubeVirt(cmd *cobra.Command, lc config.LabellerConfig, policy *labeller.Policy) error {
	fs := cmd.Flags()
	switch {
	case lc.KubeVirtCR == config.KubeVirtCRIgnore:
		policy.KubeVirtNote = "the KubeVirt CR is not read: labeller.kubeVirtCR is ignore"
		return nil
	case !fs.Changed("kubeconfig") && !fs.Changed("context"):
		policy.KubeVirtNote = "no KubeVirt CR read: this command reads one only from the cluster --kubeconfig or --context names"
		return nil
	}
	rc, err := o.client.restConfig()
	if err != nil {
		return err
	}
	rc.UserAgent = "node-agent-labels"
	kv, err := labeller.ReadKubeVirt(cmd.Context(), rc)
	if err != nil {
		return err
	}
	policy.KubeVirt, policy.KubeVirtNote = kv.Settings, kv.Note
	return nil
}
