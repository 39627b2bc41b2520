package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// CmdResult is what a finished command printed and how it exited.
type CmdResult struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Runner runs name with args and env added to berth's environment. It
// returns an error only when the command could not run to completion
// (not found, killed at ctx's deadline); a non-zero exit is in ExitCode.
// A missing binary is an error matching exec.ErrNotFound.
type Runner func(ctx context.Context, env []string, name string, args ...string) (CmdResult, error)

// ExecRunner runs commands with os/exec.
func ExecRunner(ctx context.Context, env []string, name string, args ...string) (CmdResult, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := CmdResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil && ee.ExitCode() >= 0:
		res.ExitCode = ee.ExitCode()
	default:
		if ctx.Err() != nil {
			return res, fmt.Errorf("%s %s: %w (%v)", name, strings.Join(args, " "), ctx.Err(), err)
		}
		return res, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return res, nil
}

// firstLine is the first non-empty line of b, trimmed; for messages.
func firstLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
