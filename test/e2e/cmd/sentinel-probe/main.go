// Command sentinel-probe runs its arguments as a reboot sentinel command
// through pkg/reboot/systemd's Runner (a transient unit on the system bus),
// inside the e2e machine, and prints one JSON line: the exit status, or the
// error. TestSentinelCommandOnRealSystemd reads it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/node-agent/node-agent/pkg/reboot/systemd"
)

type result struct {
	Status int    `json:"status"`
	Err    string `json:"err,omitempty"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &systemd.Runner{Dial: systemd.Dial("unix:path=/run/dbus/system_bus_socket"), Timeout: 5 * time.Second}
	status, err := r.Run(ctx, os.Args[1:])
	out := result{Status: status}
	if err != nil {
		out.Err = err.Error()
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
