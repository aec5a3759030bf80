// Command pause is the pod sandbox and the workload of the real-node tests:
// no registry is reachable here, so both images are built locally around
// this one static program.
//
// As a sandbox (no flags) it is PID 1 of a pod that shares its process
// namespace, so it reaps every orphan and exits on SIGTERM or SIGINT, as the
// kubelet's pause image does. With --listen it also answers HTTP GET on that
// address with 200, for a readiness probe, and says on which node it runs;
// with --term-delay it takes that long to stop after SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to answer readiness probes on, such as :8080")
	termDelay := flag.Duration("term-delay", 0, "how long to keep running after SIGTERM, as a workload that shuts down cleanly does")
	flag.Parse()

	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)

	if *listen != "" {
		node := os.Getenv("NODE_NAME")
		go func() {
			err := http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintf(w, "ok %s\n", node)
			}))
			fmt.Fprintln(os.Stderr, "pause:", err)
			os.Exit(1)
		}()
	}
	for s := range sig {
		if s != syscall.SIGCHLD {
			time.Sleep(*termDelay)
			return
		}
		for {
			// Reap every exited child, not only one per signal: signals of
			// the same kind coalesce.
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
