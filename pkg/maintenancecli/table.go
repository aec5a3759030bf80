package maintenancecli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/selfdrain/podselect"
	"github.com/node-agent/node-agent/pkg/vmdrain"
)

func newTabWriter(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// writePlan prints a dry run's plan of a drain of node; cordoned says
// whether an admin has cordoned it already.
func writePlan(out io.Writer, node string, cordoned bool, plan []podselect.PlannedPod) error {
	fmt.Fprintf(out, "Dry run: nothing changed. A drain of %s now would:\n", printable(node))
	if cordoned {
		fmt.Fprintln(out, "  leave the node cordoned (it is cordoned already, so ending maintenance keeps it cordoned)")
	} else {
		fmt.Fprintln(out, "  cordon the node (ending maintenance uncordons it)")
	}
	fmt.Fprintln(out, "  add the drain taint (default kubevirt.io/drain=draining:NoSchedule)")
	tw := newTabWriter(out)
	fmt.Fprintln(tw, "\nPOD\tACTION\tNOTE")
	counts := map[string]int{}
	for _, p := range plan {
		counts[p.Action]++
		note := p.Why
		if len(p.Blockers) > 0 {
			note = "blocked now: " + strings.Join(p.Blockers, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printable(p.Pod), printable(p.Action), printable(note))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\n%d to evict, %d to skip, %d finished.\n", counts["evict"], counts["skip"], counts["done"])
	return err
}

// writeVMPlan prints each VM's way off node (pkg/vmdrain), where the cluster
// runs KubeVirt.
func writeVMPlan(out io.Writer, node string, r vmdrain.Report) error {
	if !r.Served {
		return nil
	}
	if len(r.Plans) == 0 {
		_, err := fmt.Fprintf(out, "\nNo KubeVirt VM runs on %s.\n", printable(node))
		return err
	}
	fmt.Fprintf(out, "\nVMs on %s, each with its way off the node:\n", printable(node))
	tw := newTabWriter(out)
	fmt.Fprintln(tw, "VM\tSTRATEGY\tCPU\tWAY\tTARGETS\tWHY")
	for _, p := range r.Plans {
		targets := strings.Join(p.Targets, ",")
		if targets == "" {
			targets = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(p.VM.Key()), printable(p.Strategy), printable(p.CPUModel),
			p.Way, printable(targets), printable(p.Why))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if held := r.Held(); len(held) > 0 {
		names := make([]string, len(held))
		for i, p := range held {
			names[i] = printable(p.VM.Key()) + " (" + string(p.Way) + ")"
		}
		fmt.Fprintf(out, "\n%d of %d VMs cannot leave by live migration: %s. With drain.vmWithoutTarget wait (the default) the maintenance waits, the node unchanged, until each can; with proceed it drains anyway.\n",
			len(held), len(r.Plans), strings.Join(names, ", "))
	}
	writeRejections(out, r.Plans)
	if r.Note != "" {
		fmt.Fprintf(out, "Note: %s\n", printable(r.Note))
	}
	return nil
}

// writeRejections prints, for each VM whose target pod was weighed, each
// node that cannot take it and the scheduler's filter that says so.
func writeRejections(out io.Writer, plans []vmdrain.VMPlan) {
	for _, p := range plans {
		if p.Pod == nil || len(p.Placement.Rejected) == 0 {
			continue
		}
		fmt.Fprintf(out, "\nNodes that cannot take %s, by kube-scheduler's filters for its migration target pod:\n", printable(p.VM.Key()))
		tw := newTabWriter(out)
		fmt.Fprintln(tw, "NODE\tFILTER\tSCHEDULER SAYS\tDETAIL")
		for _, rj := range p.Placement.Rejected {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(rj.Node), printable(string(rj.Plugin)),
				printable(strings.Join(rj.Reasons, ", ")), printable(rj.Detail))
		}
		_ = tw.Flush()
		for _, n := range p.Notes {
			fmt.Fprintf(out, "Note on %s: %s\n", printable(p.VM.Key()), printable(n))
		}
	}
}

// writeStatusTable prints the maintenance status of nodes; one adds the
// pending pods of a single node.
func writeStatusTable(out io.Writer, nodes []corev1.Node, one bool) error {
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(out, "No node is in maintenance.")
		return err
	}
	tw := newTabWriter(out)
	fmt.Fprintln(tw, "NODE\tREQUESTED\tPHASE\tTRIGGER\tPROGRESS\tPENDING\tCORDONED\tSTARTED\tLAST ERROR")
	for _, n := range nodes {
		st, err := selfdrain.ParseStatus(&n)
		reason, refusal := selfdrain.ParseMaintenanceRequest(&n)
		requested := requestCell(reason, refusal)
		name := printable(n.Name)
		switch {
		case err != nil:
			fmt.Fprintf(tw, "%s\t%s\t?\t\t\t\t%t\t\t%s\n", name, requested, n.Spec.Unschedulable, printable(err.Error()))
		case st == nil:
			fmt.Fprintf(tw, "%s\t%s\t-\t\t\t\t%t\t\t\n", name, requested, n.Spec.Unschedulable)
		default:
			phase := printable(string(st.Phase))
			if !st.Active() {
				phase += " (ended)"
			}
			started := ""
			if st.StartTime != nil {
				started = st.StartTime.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d%%\t%d/%d\t%t\t%s\t%s\n", name, requested, phase, printable(string(st.Trigger)),
				st.DrainProgress, len(st.PendingPods), st.EvictionPods, n.Spec.Unschedulable, started, printable(st.LastError))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !one {
		return writeRequesters(out, nodes)
	}
	var more []string
	if _, refusal := selfdrain.ParseMaintenanceRequest(&nodes[0]); refusal != nil {
		more = append(more, "Request refused, nothing changed for it: "+printable(refusal.Error()))
	}
	more = append(more, requesterLines(&nodes[0])...)
	st, perr := selfdrain.ParseStatus(&nodes[0])
	if perr == nil && st != nil && len(st.PendingPods) > 0 {
		more = append(more, "Pending pods: "+printable(strings.Join(st.PendingPods, ", ")))
	}
	if perr == nil && st != nil && st.PodAccess != "" {
		more = append(more, "Pods reached as: "+podAccessText(st.PodAccess))
	}
	if perr == nil && st != nil && len(st.VMs) > 0 {
		more = append(more, "VMs:")
		for _, v := range st.VMs {
			line := "  " + printable(v.Name) + " " + printable(v.Phase)
			if v.Target != "" {
				line += " -> " + printable(v.Target)
			}
			if v.Since != nil {
				line += " since " + v.Since.UTC().Format(time.RFC3339)
			}
			if v.Message != "" {
				line += ": " + printable(v.Message)
			}
			more = append(more, line)
		}
	}
	// A reboot drains the node too, or waits for this maintenance to end.
	if line := rebootLine(&nodes[0]); line != "" {
		more = append(more, line)
	}
	if len(more) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(out, "\n%s\n", strings.Join(more, "\n"))
	return err
}

// writeNodeMaintenanceTable prints NodeMaintenance objects; exist tells
// which of their nodes exist.
func writeNodeMaintenanceTable(out io.Writer, objs []*maintenance.NodeMaintenance, exist map[string]bool) error {
	if len(objs) == 0 {
		_, err := fmt.Fprintln(out, "No NodeMaintenance object.")
		return err
	}
	tw := newTabWriter(out)
	fmt.Fprintln(tw, "NODEMAINTENANCE\tNODE\tPHASE\tPROGRESS\tPENDING\tLAST ERROR\tNOTE")
	for _, o := range objs {
		var notes []string
		if !exist[o.Spec.NodeName] {
			notes = append(notes, "node "+printable(o.Spec.NodeName)+" does not exist: no agent serves this object; delete it")
		}
		if o.DeletionTimestamp != nil {
			notes = append(notes, "deleted; kept until the agent has restored the node")
		}
		phase := printable(string(o.Status.Phase))
		if phase == "" {
			phase = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%d/%d\t%s\t%s\n", printable(o.ID()), printable(o.Spec.NodeName), phase, o.Status.DrainProgress,
			len(o.Status.PendingPods), o.Status.EvictionPods, printable(o.Status.LastError), strings.Join(notes, "; "))
	}
	return tw.Flush()
}

// podAccessText says what a status's podAccess means (pkg/podaccess).
func podAccessText(mode string) string {
	switch podaccess.Mode(mode) {
	case podaccess.ModeNode:
		return "node (the node itself, by constrained impersonation)"
	case podaccess.ModeClusterWide:
		return "cluster-wide (the ServiceAccount's own grant, deploy/components/cluster-wide-eviction)"
	default:
		return printable(mode)
	}
}

// requestCell is the REQUESTED cell for a request annotation's reason, or
// for its refusal (pkg/reasontext): the agent acts on neither a blank nor a
// refused value.
func requestCell(reason string, refusal error) string {
	var re *reasontext.RefusedError
	switch {
	case errors.As(refusal, &re):
		return printable(strings.TrimSpace(re.Value)) + " (refused)"
	case reason == "":
		return "-"
	}
	return printable(reason)
}

// requesterLines lists who holds the maintenance of n (the agent's list
// beside its record, pkg/maintenance requesters), one line each, or says
// the list cannot be read.
func requesterLines(n *corev1.Node) []string {
	list, err := maintenance.ParseRequesters(n)
	if err != nil {
		return []string{"Requesters: " + printable(err.Error())}
	}
	if len(list) == 0 {
		return nil
	}
	out := []string{"Requesters (the maintenance ends when the last one ends its request):"}
	for _, r := range list {
		line := "  " + printable(r.String())
		if r.Reason != "" {
			line += ": " + printable(r.Reason)
		}
		if r.Since != nil {
			line += " (since " + r.Since.UTC().Format(time.RFC3339) + ")"
		}
		out = append(out, line)
	}
	return out
}

// writeRequesters prints, under the table of every node in maintenance, who
// holds the maintenance of each node that lists requesters.
func writeRequesters(out io.Writer, nodes []corev1.Node) error {
	var lines []string
	for i := range nodes {
		list, err := maintenance.ParseRequesters(&nodes[i])
		if err != nil || len(list) == 0 {
			continue
		}
		lines = append(lines, printable(nodes[i].Name)+": "+printable(requesterNames(list)))
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(out, "\nRequesters:\n%s\n", strings.Join(lines, "\n"))
	return err
}

// requesterNames joins the requesters' names.
func requesterNames(list []maintenance.Requester) string {
	s := make([]string, len(list))
	for i, r := range list {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
