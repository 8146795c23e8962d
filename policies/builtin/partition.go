package builtin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// Template is a partition policy that fills a template from the request:
// ${name} is the resource name, ${kind} the primitive kind, and ${attr}
// any other attribute. Everything else is literal, so "{${tenant}}:${name}"
// puts each tenant in its own cluster slot. A missing or empty attribute
// fails closed with an error wrapping policies.ErrPartition. Build one with
// ParseTemplate, which validates the template. Safe for concurrent use.
type Template struct {
	src   string
	parts []templatePart
}

type templatePart struct {
	literal string
	attr    string // non-empty: a placeholder
}

// ParseTemplate validates src: every "${" must close with "}" around a
// name of letters, digits, '_', '-' or '.'.
func ParseTemplate(src string) (*Template, error) {
	if src == "" {
		return nil, fmt.Errorf("partition template is empty")
	}
	t := &Template{src: src}
	rest := src
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, templatePart{literal: rest})
			}
			return t, nil
		}
		if i > 0 {
			t.parts = append(t.parts, templatePart{literal: rest[:i]})
		}
		j := strings.IndexByte(rest[i+2:], '}')
		if j < 0 {
			return nil, fmt.Errorf("partition template %q: unterminated ${ at offset %d", src, len(src)-len(rest)+i)
		}
		name := rest[i+2 : i+2+j]
		if name == "" {
			return nil, fmt.Errorf("partition template %q: empty ${} at offset %d", src, len(src)-len(rest)+i)
		}
		for _, r := range name {
			if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return nil, fmt.Errorf("partition template %q: bad character %q in ${%s}", src, r, name)
			}
		}
		t.parts = append(t.parts, templatePart{attr: name})
		rest = rest[i+2+j+1:]
	}
}

// Attributes lists the attribute names the template uses (besides name
// and kind), in order of appearance.
func (t *Template) Attributes() []string {
	var out []string
	for _, p := range t.parts {
		if p.attr != "" && p.attr != "name" && p.attr != "kind" {
			out = append(out, p.attr)
		}
	}
	return out
}

// String returns the template source.
func (t *Template) String() string { return t.src }

// PartitionKey implements policies.PartitionPolicy.
func (t *Template) PartitionKey(_ context.Context, r policies.PartitionRequest) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.attr == "" {
			b.WriteString(p.literal)
			continue
		}
		var v string
		switch p.attr {
		case "name":
			v = r.Name
		case "kind":
			v = r.Kind
		default:
			v = r.Attributes[p.attr]
		}
		if v == "" {
			return "", fmt.Errorf("%w: template %q needs a non-empty attribute %q", policies.ErrPartition, t.src, p.attr)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// WriterPreference is a starvation policy with a fixed bound: once the
// oldest writer has waited Bound, new readers are held off. Zero is strict
// writer preference; policies.Unbounded is reader preference.
type WriterPreference struct {
	Bound time.Duration
}

// Validate rejects a negative bound.
func (w WriterPreference) Validate() error {
	if w.Bound < 0 {
		return fmt.Errorf("writer preference: negative bound %v", w.Bound)
	}
	return nil
}

// WriterBound implements policies.StarvationPolicy.
func (w WriterPreference) WriterBound(context.Context, policies.StarvationRequest) time.Duration {
	return w.Bound
}
