package redlock

import "time"

// DisableRestartGuard turns the restart guard off: nodes count toward
// quorums whatever their uptime or run_id history. For tests on freshly
// started servers and for the control that shows the double holder the
// guard prevents; call it right after New.
func DisableRestartGuard(g *Group) { g.noGuard = true }

// SetQuorum makes q grants a quorum instead of a majority: a broken
// Group for the controls that show the checkers catch a violation.
func SetQuorum(g *Group, q int) { g.quorumFor = q }

// EndedAt returns when the last failed renewal of l let its cleanup go
// (after the handle had failed closed); zero if none did.
func EndedAt(l *Lock) time.Time {
	o := l.h.Ops()
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	return o.st.ended
}
