package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/coordhost/coordhost/config"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// listFlag collects the values of a repeatable flag (-var, -attr) in
// order; they are checked after parsing so that the message names the
// flag once.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// parseVars turns -var NAME=VALUE flags into config.LoadOptions.Vars; a
// later value for the same NAME wins. nil when there are none.
func parseVars(flags []string) (map[string]cty.Value, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	vars := make(map[string]cty.Value, len(flags))
	for _, f := range flags {
		name, v, err := config.ParseVarFlag(f)
		if err != nil {
			return nil, errors.New(strings.TrimPrefix(err.Error(), "config: "))
		}
		vars[name] = v
	}
	return vars, nil
}

// parseAttrs turns -attr KEY=VALUE flags into partition attributes; a
// later value for the same KEY wins. nil when there are none.
func parseAttrs(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	attrs := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("-attr %q: want KEY=VALUE", f)
		}
		if k == "" {
			return nil, fmt.Errorf("-attr %q: empty KEY", f)
		}
		attrs[k] = v
	}
	return attrs, nil
}

// checkListen checks a -listen address: host:port with a numeric port
// (0 for any free port); an empty host means all interfaces.
func checkListen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("-listen %q is not host:port", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("-listen %q: bad port %q", s, port)
	}
	return nil
}

// colorFor reports whether diagnostics written to w may use colors: w is
// a terminal and NO_COLOR is not set.
func (e *env) colorFor(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f) && e.getenv("NO_COLOR") == ""
}

// writeDiags renders diags to stderr with file, line and snippet; text
// from the file and the diagnostics is escaped (safeDiags).
func (e *env) writeDiags(path string, files map[string]*hcl.File, diags hcl.Diagnostics) {
	files, diags = safeDiags(files, diags, path)
	_ = config.WriteDiagnostics(e.stderr, files, diags, e.colorFor(e.stderr))
}

// countDiags returns the number of errors and warnings in diags.
func countDiags(diags hcl.Diagnostics) (errs, warns int) {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs++
		} else {
			warns++
		}
	}
	return errs, warns
}

// plural returns "1 error", "2 errors".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// logDiags logs each diagnostic as one record (errors at level ERROR,
// warnings at WARN) with its position and source line, so that they stay
// one per line in JSON logs too.
func logDiags(log *slog.Logger, files map[string]*hcl.File, diags hcl.Diagnostics) {
	for _, d := range diags {
		level, severity := slog.LevelError, "error"
		if d.Severity != hcl.DiagError {
			level, severity = slog.LevelWarn, "warning"
		}
		attrs := []slog.Attr{slog.String("severity", severity), slog.String("summary", d.Summary)}
		if d.Detail != "" {
			attrs = append(attrs, slog.String("detail", d.Detail))
		}
		if s := d.Subject; s != nil {
			attrs = append(attrs, slog.String("file", s.Filename), slog.Int("line", s.Start.Line), slog.Int("column", s.Start.Column))
			if src := sourceLine(files[s.Filename], s.Start.Line); src != "" {
				attrs = append(attrs, slog.String("source", src))
			}
		}
		log.LogAttrs(context.Background(), level, "configuration "+severity, attrs...)
	}
}

// sourceLine returns line n (1-based) of f, trimmed, or "".
func sourceLine(f *hcl.File, n int) string {
	if f == nil || n < 1 {
		return ""
	}
	lines := bytes.Split(f.Bytes, []byte("\n"))
	if n > len(lines) {
		return ""
	}
	return strings.TrimSpace(string(lines[n-1]))
}

// newLogger returns the logger `serve` uses: text or JSON records on w at
// the level of the server block. The text handler quotes and escapes any
// value (and message) with a character that is not printable; JSON
// records go through jsonSafeWriter for the characters the JSON encoder
// leaves as they are.
func newLogger(w io.Writer, s config.Server) (*slog.Logger, slog.Handler) {
	opts := &slog.HandlerOptions{Level: slogLevel(s.LogLevel)}
	var h slog.Handler
	if s.LogFormat == config.LogJSON {
		h = slog.NewJSONHandler(jsonSafeWriter{w}, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h), h
}

func slogLevel(l config.LogLevel) slog.Level {
	switch l {
	case config.LogDebug:
		return slog.LevelDebug
	case config.LogWarn:
		return slog.LevelWarn
	case config.LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// prefixWriter writes every Write (one slog record) after prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// cliLogger is the logger of the host inside `lock hold -config`: warnings
// and errors only (dev mode, policy fallbacks, plugin trouble), as
// "coordhost: level=WARN msg=..." lines without timestamps.
func cliLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(prefixWriter{w, "coordhost: "}, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}
