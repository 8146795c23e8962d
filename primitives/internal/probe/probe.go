// Package probe asks a server which features it has, so a primitive can
// refuse clearly, before writing anything, on a server that lacks them.
package probe

import (
	"context"
	"strings"

	"github.com/redis/rueidis"
)

// HasCommands reports whether the server knows every command in names
// (COMMAND INFO answers nil for an unknown command).
func HasCommands(ctx context.Context, c rueidis.Client, names ...string) (bool, error) {
	vals, err := c.Do(ctx, c.B().CommandInfo().CommandName(names...).Build()).ToArray()
	if err != nil {
		return false, err
	}
	for _, v := range vals {
		if v.IsNil() {
			return false, nil
		}
	}
	return len(vals) == len(names), nil
}

// Version returns the server's redis_version, or "unknown".
func Version(ctx context.Context, c rueidis.Client) string {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
