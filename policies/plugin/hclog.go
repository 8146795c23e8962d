package plugin

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/coordhost/coordhost/policies"
)

// slogHCLog adapts a *slog.Logger to hclog.Logger, the logger go-plugin
// wants for itself and for the log lines it reads from the plugin's stderr.
// Levels map one to one (Trace is slog.LevelDebug-4); the hclog name is
// logged as the attribute "logger". SetLevel is ignored: the slog handler
// decides what is printed.
type slogHCLog struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*slogHCLog)(nil)

const levelTrace = slog.LevelDebug - 4

func newSlogHCLog(l *slog.Logger, name string) *slogHCLog {
	return &slogHCLog{l: l, name: name}
}

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lv := toSlogLevel(level)
	ctx := context.Background()
	if !h.l.Enabled(ctx, lv) {
		return
	}
	if h.name != "" {
		args = append(args, "logger", h.name)
	}
	h.l.Log(ctx, lv, policies.EscapeText(msg), escapeArgs(args)...)
}

// escapeArgs escapes the strings and errors among key/value args: go-plugin
// logs the plugin's standard error lines through this logger, as a message
// and (for hclog's JSON lines) key/value pairs, all of them the plugin's
// text.
func escapeArgs(args []any) []any {
	out := args
	for i, a := range args {
		var e any
		switch v := a.(type) {
		case string:
			if s := policies.EscapeText(v); s != v {
				e = s
			}
		case error:
			e = policies.EscapeError(v)
		default:
			continue
		}
		if e == nil {
			continue
		}
		if &out[0] == &args[0] {
			out = append([]any(nil), args...) // never modify the caller's slice
		}
		out[i] = e
	}
	return out
}

func (h *slogHCLog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLog) enabled(l slog.Level) bool { return h.l.Enabled(context.Background(), l) }
func (h *slogHCLog) IsTrace() bool             { return h.enabled(levelTrace) }
func (h *slogHCLog) IsDebug() bool             { return h.enabled(slog.LevelDebug) }
func (h *slogHCLog) IsInfo() bool              { return h.enabled(slog.LevelInfo) }
func (h *slogHCLog) IsWarn() bool              { return h.enabled(slog.LevelWarn) }
func (h *slogHCLog) IsError() bool             { return h.enabled(slog.LevelError) }

func (h *slogHCLog) ImpliedArgs() []any { return h.implied }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	return &slogHCLog{
		l:       h.l.With(args...),
		name:    h.name,
		implied: append(append([]any(nil), h.implied...), args...),
	}
}

func (h *slogHCLog) Name() string { return h.name }

func (h *slogHCLog) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	return &slogHCLog{l: h.l, name: name, implied: h.implied}
}

func (h *slogHCLog) SetLevel(hclog.Level) {}

func (h *slogHCLog) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(toSlogLevel(lv)) {
			return lv
		}
	}
	return hclog.Off
}

func (h *slogHCLog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}

func (h *slogHCLog) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(opts).Writer()
}
