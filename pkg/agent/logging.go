package agent

import (
	"fmt"
	"io"
	"log/slog"

	"k8s.io/klog/v2"
)

// NewLogger returns a structured logger writing format ("text" or "json") at
// level to w, and routes client-go's klog output through it so every line of
// the process has one shape.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: must be debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: must be text or json", format)
	}
	logger := slog.New(h)
	klog.SetSlogLogger(logger)
	return logger, nil
}
