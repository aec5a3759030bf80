package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newLabelsCommand is replaced by the host CPU discovery work (issue 3).
func newLabelsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "labels",
		Short: "Print the CPU labels this host would get",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("labels: not built yet")
		},
	}
}
