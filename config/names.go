package config

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// keyedName checks the label of block b, whose name goes into Redis keys
// (lock, latch, rwlock, semaphore, redlock, rate_limit, lease), and reports
// false after one diagnostic on the label when it is unusable: empty, with
// a "/" (it separates the name from a partition key, so "a/b" would share
// keys with block "a" partitioned to "b"), or starting with
// ReservedKeyPrefix. noun names the block in the detail ("Rate limit").
func (d *decoder) keyedName(b *hcl.Block, noun string) (string, bool) {
	name := b.Labels[0]
	if name != "" && !strings.Contains(name, "/") && !strings.HasPrefix(name, ReservedKeyPrefix) {
		return name, true
	}
	d.add(&hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid " + b.Type + " name",
		Detail: fmt.Sprintf("%s name %q must be non-empty, may not contain \"/\" (it separates the name from a partition key) and may not start with %q (reserved for keys coordhost derives).",
			noun, name, ReservedKeyPrefix),
		Subject: b.LabelRanges[0].Ptr(),
	})
	return name, false
}
