// Package e2e runs node-agent against a real systemd: in a systemd-nspawn
// container (testenv.Container) with systemd as PID 1, dbus and
// systemd-logind inside, sharing the host's network so that it reaches a
// control plane on 127.0.0.1.
//
// Tests skip when root, systemd-nspawn, nsenter or the rootfs are missing,
// unless NODE_AGENT_E2E=1 is set (as `make e2e` does): then they fail and
// say what to install or build.
package e2e
