package main

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// faultEnv names a file whose content makes the helper misbehave, for the
// integration tests of the daemon's side (test/integration,
// TestLabellerSurvivesBrokenDiscovery): "hang", "signal" (killed by SIGKILL,
// as the OOM killer would) or "garbage" (prints what is not an answer). The
// file is read at each start, so a test can heal the helper between periods.
// Unset or an empty file, the helper runs normally.
const faultEnv = "NODE_AGENT_TEST_DISCOVERY_FAULT"

// injectFault misbehaves as the file at path says; see faultEnv.
func injectFault(path string) {
	data, _ := os.ReadFile(path)
	switch strings.TrimSpace(string(data)) {
	case "hang":
		os.Stderr.WriteString("node-agent-discover: test fault: hanging\n")
		// Deaf to SIGTERM, as a process stuck in a C call is in effect:
		// only the daemon's SIGKILL ends it.
		signal.Ignore(syscall.SIGTERM, os.Interrupt)
		for {
			time.Sleep(time.Hour)
		}
	case "signal":
		os.Stderr.WriteString("node-agent-discover: test fault: killing myself\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "garbage":
		os.Stdout.WriteString("this is not JSON\n")
		os.Exit(0)
	}
}
