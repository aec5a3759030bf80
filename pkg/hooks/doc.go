// Package hooks owns the lifecycle hooks on the agent's own Node: the
// annotations pre-drain.hook.node-agent.io/<name> and
// post-drain.hook.node-agent.io/<name> that an outside controller (or an
// admin) adds to hold a maintenance, and removes to let it go. A pre-drain
// hook holds the maintenance (and a reboot's drain) before the cordon; a
// post-drain hook holds it after its pods are gone, before it is reported
// done. The value says who owns the hook, as text for people.
//
// The package parses the hooks (Parse), decides whether they still hold
// within maintenance.hookBound (HoldOf), and asks the pre-drain hooks as a
// check before the drain (PreDrainCheck). Nothing runs on the host: a hook
// is an annotation only, and the agent never adds or removes one (the
// admission policy refuses its token the keys). pkg/maintenance decides
// where in the lifecycle each phase holds (maintenance.Hooks).
package hooks
