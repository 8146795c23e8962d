package wasm

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/coordhost/coordhost/policies"
)

// Guest logging limits.
const (
	maxLogLine      = policies.MaxTextLen // bytes per message or output line
	logLinesPerSec  = 100                 // per instance
	logWindow       = time.Second
	truncatedSuffix = "…(truncated)" // what policies.EscapeText appends
)

// infoKey is the context key under which calls carry their instance's
// *instInfo, for the host functions.
type infoKey struct{}

// instInfo is per-instance state of the host functions. Only the goroutine
// holding the instance touches it.
type instInfo struct {
	logger  *slog.Logger
	winFrom time.Time
	lines   int
	dropped int
}

// emit logs one guest line, subject to the per-instance rate limit.
func (in *instInfo) emit(level slog.Level, msg string, attrs ...slog.Attr) {
	now := time.Now()
	if now.Sub(in.winFrom) >= logWindow {
		if in.dropped > 0 {
			in.logger.LogAttrs(context.Background(), slog.LevelWarn, "wasm policy: guest log lines dropped (rate limit)",
				slog.Int("dropped", in.dropped), slog.Int("per_second", logLinesPerSec))
		}
		in.winFrom, in.lines, in.dropped = now, 0, 0
	}
	if in.lines >= logLinesPerSec {
		in.dropped++
		return
	}
	in.lines++
	in.logger.LogAttrs(context.Background(), level, clean(msg), attrs...)
}

// clean makes guest bytes a printable, bounded log message: at most
// maxLogLine bytes, every control character (ANSI escapes, newlines) and
// invalid UTF-8 escaped (policies.EscapeText).
func clean(s string) string {
	return policies.EscapeText(strings.TrimRight(s, "\r\n"))
}

// hostLog implements policy_host.log(ptr, len).
func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	info, _ := ctx.Value(infoKey{}).(*instInfo)
	if info == nil {
		return
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	b, ok := mod.Memory().Read(ptr, min(n, maxLogLine+1))
	if !ok {
		info.emit(slog.LevelWarn, "wasm policy: policy_host.log with a range outside memory",
			slog.Uint64("ptr", uint64(ptr)), slog.Uint64("len", uint64(n)))
		return
	}
	info.emit(slog.LevelInfo, string(b))
}

// lineWriter sends a WASI stream (stdout or stderr) to the logger line by
// line. wazero writes from the goroutine running the instance.
type lineWriter struct {
	info   *instInfo
	level  slog.Level
	stream string
	buf    []byte
	wrote  bool // anything was written
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.wrote = w.wrote || n > 0
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLogLine + 1 - len(w.buf)
			w.buf = append(w.buf, p[:min(len(p), max(room, 0))]...)
			if len(w.buf) > maxLogLine {
				w.flush() // an overlong line: log what we have
			}
			break
		}
		room := maxLogLine + 1 - len(w.buf)
		w.buf = append(w.buf, p[:min(i, max(room, 0))]...)
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.info.emit(w.level, string(w.buf), slog.String("stream", w.stream))
	}
	w.buf = w.buf[:0]
}
