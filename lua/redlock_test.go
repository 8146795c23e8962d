package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/lua"
)

// redlock_acquire validates every argument before its first write, refuses
// a server whose run_id is not the expected one without writing, and
// answers as its header says, on every server kind.
func TestRedlockAcquireScript(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			eval := func(keys []string, args ...string) ([]string, error) {
				cmd := append([]string{"EVAL", lua.RedlockAcquire, strconv.Itoa(len(keys))}, keys...)
				v, err := s.Do(ctx, append(cmd, args...)...).ToAny()
				if err != nil {
					return nil, err
				}
				var out []string
				for _, e := range v.([]any) {
					switch e := e.(type) {
					case int64:
						out = append(out, strconv.FormatInt(e, 10))
					case string:
						out = append(out, e)
					}
				}
				return out, nil
			}
			info := s.MustCmd(t, "INFO", "server")
			runID := ""
			for line := range strings.Lines(info) {
				if v, ok := strings.CutPrefix(line, "run_id:"); ok {
					runID = strings.TrimSpace(v)
				}
			}
			if len(runID) != 40 {
				t.Fatalf("INFO server has no run_id: %q", info)
			}
			s.MustCmd(t, "SET", "other", "x")
			before := snapshot(t, s)
			for _, args := range [][]string{
				{"", "1000", runID}, {"tok", "0", runID}, {"tok", "-5", runID}, {"tok", "1.5", runID},
				{"tok", "3153600000001", runID}, {"tok", "1000", ""}, {"tok", "1000"}, {"tok"},
			} {
				if _, err := eval([]string{"l"}, args...); err == nil || !strings.Contains(err.Error(), "COORDHOST_BADARG") {
					t.Errorf("%q: %v, want COORDHOST_BADARG", args, err)
				}
			}
			if got, err := eval([]string{"l"}, "tok", "1000", strings.Repeat("0", 40)); err != nil || got[0] != "-1" || got[1] != runID {
				t.Errorf("another run_id: %q, %v; want -1 and this server's run_id", got, err)
			}
			if snap := snapshot(t, s); snap != before {
				t.Errorf("refusals wrote:\nbefore %s\nafter  %s", before, snap)
			}
			s.MustCmd(t, "RPUSH", "list", "v")
			before = snapshot(t, s)
			if _, err := eval([]string{"list"}, "tok", "1000", runID); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("a list key: %v, want WRONGTYPE", err)
			}
			if snap := snapshot(t, s); snap != before {
				t.Errorf("refusals wrote:\nbefore %s\nafter  %s", before, snap)
			}

			got, err := eval([]string{"l"}, "tok", "60000", runID)
			if err != nil || len(got) != 3 || got[0] != "1" || got[1] != runID {
				t.Fatalf("grant: %q, %v", got, err)
			}
			if s.MustCmd(t, "GET", "l") != "tok" {
				t.Fatal("the grant wrote no token")
			}
			got, err = eval([]string{"l"}, "tok2", "60000", runID)
			if err != nil || len(got) != 5 || got[0] != "0" || got[3] != "tok" {
				t.Fatalf("held: %q, %v", got, err)
			}
			if ms, _ := strconv.Atoi(got[4]); ms <= 59000 || ms > 60000 {
				t.Fatalf("held: pttl %s", got[4])
			}
		})
	}
}
