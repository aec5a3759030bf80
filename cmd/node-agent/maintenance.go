package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newMaintenanceCommand is replaced by the self-drain work (issue 5).
func newMaintenanceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "maintenance",
		Short: "Start, stop or show the maintenance (self-drain) of a node",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("maintenance: not built yet")
		},
	}
}
