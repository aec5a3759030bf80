package maintenancecli

// CommandHelp is the help of `node-agent maintenance`: what its commands
// do to the maintenance APIs, kept beside the client that does it.
const CommandHelp = `maintenance drives the maintenance APIs of node-agent: the annotation on the
Node (--api annotation, the default) or NodeMaintenance objects
(--api nodemaintenance; the agent serves them when maintenance.nodeMaintenance
is on).

  start NODE --reason TEXT   sets node-agent.io/maintenance=TEXT (with --owner
                             NAME, maintenance.node-agent.io/NAME=TEXT), or
                             creates the NodeMaintenance object nm-NODE. The
                             agent on that node cordons it, adds the drain
                             taint (so VMs live-migrate) and evicts its pods,
                             respecting PodDisruptionBudgets. A TEXT that reads as no
                             (0, f, false, n, no, off, null, ~, nil, none, in
                             any case) is refused, here and by the agent.
  stop NODE                  removes the annotation (with --owner NAME, only
                             that owner's), or deletes the node's
                             NodeMaintenance objects. Once no requester is
                             left, the agent stops evicting and undoes only
                             what it did: a node an admin had cordoned before
                             stays cordoned.
  status [NODE]              shows the status the agent reports on the Node
                             (node-agent.io/maintenance-status), who holds the
                             maintenance (node-agent.io/maintenance-requesters)
                             and the NodeMaintenance objects, with both APIs
                             unless --api.

Several requesters may hold one node's maintenance: the annotation, each
owner's annotation (--owner), each NodeMaintenance object and the reboot
controller. One drain serves them all, and the node stays in maintenance
until the last one ends its request; while others stay, an Event on the Node
says who ended and who still holds it. At most slots.limit nodes (default 1)
drain at once; the others show phase Waiting (Running with the reason in
lastError on a NodeMaintenance object). A drain still running after
drain.timeout stops, gives its slot to the next node and shows phase Failed
with the pods that stayed and why; it is not tried again until asked anew:
start with another reason, or stop --wait and start.`
