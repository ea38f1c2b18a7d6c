package main

// Small helpers shared across the agent: environment overlays, min/max, error text, and
// files the sandbox user may read.

import (
	"errors"
	"os"
	"sort"
	"strings"
)

// overlay returns env (KEY=VALUE list) with the given variables set.
func overlay(env []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return env
	}
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		name := kv
		if i := strings.IndexByte(kv, '='); i >= 0 {
			name = kv[:i]
		}
		if _, replaced := extra[name]; !replaced {
			out = append(out, kv)
		}
	}
	names := make([]string, 0, len(extra))
	for name := range extra {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, name+"="+extra[name])
	}
	return out
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Path + ": " + pathErr.Err.Error()
	}
	return err.Error()
}

// writeReadable writes a file of the agent's that the sandbox user may read.
func writeReadable(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}
