package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplicaOf starts a fresh server of the same kind as primary (opts
// may add arguments) and makes it a replica of primary (ReplicaOf), then
// waits until primary lists it online (INFO replication: state=online)
// and it has acknowledged the primary's replication offset, so that WAIT
// counts it, within StartTimeout (about a second: the replica
// acknowledges once a second when nobody asks). Its shutdown is
// registered with t.Cleanup like Start's. Pause on the replica (SIGSTOP)
// stops its acknowledgements: WAIT on primary then counts it out.
func StartReplicaOf(t testing.TB, primary *Server, opts ...Option) *Server {
	t.Helper()
	r := Start(t, append([]Option{WithKind(primary.Kind)}, opts...)...)
	r.ReplicaOf(t, primary, primary.Addr)
	return r
}

// ReplicaOf makes s a replica of primary with REPLICAOF, connecting to
// via ("host:port": primary.Addr, or a proxy in front of it, so that a
// test can cut the replication link) and waits as StartReplicaOf does.
func (s *Server) ReplicaOf(t testing.TB, primary *Server, via string) {
	t.Helper()
	r := s
	host, port, err := net.SplitHostPort(via)
	if err != nil {
		t.Fatalf("redistest: ReplicaOf via %q: %v", via, err)
	}
	// Start the full sync at once, not after the default 5s delay that
	// waits for more replicas to share a diskless transfer.
	primary.MustCmd(t, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	r.MustCmd(t, "REPLICAOF", host, port)
	// Online is not enough: after a diskless sync the primary streams
	// nothing to the replica until its first REPLCONF ACK (sent once a
	// second), and until then WAIT cannot count it. Wait until the
	// replica acknowledged the primary's offset after a write (a PUBLISH,
	// which replicates without leaving a key).
	deadline := time.Now().Add(StartTimeout)
	announced := "port=" + strconv.Itoa(r.Port) + ","
	var want int64
	for {
		if want == 0 {
			primary.MustCmd(t, "PUBLISH", "redistest:replica-sync", r.Addr)
		}
		pinfo, perr := primary.Cmd(t, "INFO", "replication")
		rinfo, rerr := r.Cmd(t, "INFO", "replication")
		if perr == nil && rerr == nil && infoField(rinfo, "master_link_status") == "up" {
			if want == 0 {
				want, _ = strconv.ParseInt(infoField(pinfo, "master_repl_offset"), 10, 64)
			}
			for line := range strings.Lines(pinfo) {
				if i := strings.Index(line, announced); i >= 0 && strings.Contains(line, "state=online") {
					acked, _ := strconv.ParseInt(field(line[i:], "offset"), 10, 64)
					if acked >= want && want > 0 {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s of %s not online and acknowledging within %v:\n%s\n%s (%v, %v)", r.Addr, primary.Addr, StartTimeout, pinfo, rinfo, perr, rerr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// field returns the value of name= in a comma-separated INFO entry such as
// "slave0:ip=127.0.0.1,port=6380,state=online,offset=42,lag=0".
func field(entry, name string) string {
	for _, kv := range strings.Split(strings.TrimSpace(entry), ",") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// replicaProblem returns "" when r reports itself an in-sync replica of
// primary (INFO replication: role slave, primary's port, link up), else
// what is wrong.
func replicaProblem(ctx context.Context, r, primary *Server) string {
	info, err := r.Do(ctx, "INFO", "replication").ToString()
	if err != nil {
		return fmt.Sprintf("%s: INFO replication: %v", r.Addr, err)
	}
	role, port, link := infoField(info, "role"), infoField(info, "master_port"), infoField(info, "master_link_status")
	if role != "slave" || port != strconv.Itoa(primary.Port) || link != "up" {
		return fmt.Sprintf("%s is not an in-sync replica of %s: role %s, master_port %s, master_link_status %s", r.Addr, primary.Addr, role, port, link)
	}
	return ""
}
