package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds and intervals of LatchService.
const (
	// MaxLatchCount is the largest count Create and Reset accept:
	// 2^53-1, the largest the latch scripts hold exactly (latch.MaxCount)
	// and the largest integer a JSON client's number holds exactly.
	MaxLatchCount = latch.MaxCount
	// MaxLatchGenerationBytes bounds a generation a request may give; the
	// daemon's generations are 26 characters of printable ASCII.
	MaxLatchGenerationBytes = primitives.MaxTokenBytes
	// DefaultWaitHeartbeat is how often a Wait stream repeats the count
	// while it waits (Options.WaitHeartbeat): well inside the idle
	// timeouts of common proxies and load balancers (30 to 60 s).
	DefaultWaitHeartbeat = 15 * time.Second
	// MinWaitHeartbeat is the shortest Options.WaitHeartbeat.
	MinWaitHeartbeat = 10 * time.Millisecond
)

// latchService serves coordhost.v1.LatchService on the `latch` blocks,
// through Host.Latch.
//
// Statuses (grant.proto): NotFound (REASON_NAME_NOT_CONFIGURED) for a
// name no latch block has; InvalidArgument naming "name", "attributes",
// "count" or "generation" (nothing is sent to Redis; "attributes" also
// when the partition policy finds no key in them); AlreadyExists when
// Create finds a latch; NotFound (REASON_LATCH_NOT_FOUND) when Join, or
// Count of the current generation, finds none; Unknown
// (REASON_OUTCOME_UNKNOWN) when the reply of a write (Create, Reset,
// CountDown, Delete) was lost, so it may or may not have happened;
// Aborted when Join, Count or Delete of the current generation found it
// replaced under every one of their attempts (ErrLatchChanged);
// FailedPrecondition when the key holds something that is not a latch;
// Unavailable when Redis fails or the daemon stops; Canceled or
// DeadlineExceeded with the call.
type latchService struct{ h *Host }

// checkLatchCount checks a Create or Reset count.
func checkLatchCount(name string, n int64) *connect.Error {
	switch {
	case n < 1:
		return invalidField("count", name, "%d, must be at least 1", n)
	case n > MaxLatchCount:
		return invalidField("count", name, "%d, at most %d", n, int64(MaxLatchCount))
	}
	return nil
}

// checkGeneration checks a request's generation; an empty one is an
// error only when required.
func checkGeneration(name, gen string, required bool) *connect.Error {
	switch {
	case gen == "":
		if required {
			return invalidField("generation", name, "empty: give the generation that Create, Reset or Join answered")
		}
		return nil
	case len(gen) > MaxLatchGenerationBytes:
		return invalidField("generation", name, "%d bytes, at most %d", len(gen), MaxLatchGenerationBytes)
	}
	for i := 0; i < len(gen); i++ {
		if c := gen[i]; c <= ' ' || c > '~' {
			return invalidField("generation", name, "byte %#x at %d: not a generation (printable ASCII without spaces)", c, i)
		}
	}
	return nil
}

// latch authorizes name for the caller and returns its Latch.
func (s latchService) latch(ctx context.Context, name string) (*Latch, error) {
	if err := authorizeName(ctx, name); err != nil {
		return nil, err
	}
	l, err := s.h.Latch(name)
	if err != nil {
		return nil, latchError(ctx, name, err)
	}
	return l, nil
}

// latchError maps an error of a latch call on name to a status.
func latchError(ctx context.Context, name string, err error) error {
	switch {
	case errors.Is(err, latch.ErrExists):
		return apiError(connect.CodeAlreadyExists, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
	case errors.Is(err, latch.ErrNotFound):
		return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_LATCH_NOT_FOUND, "", name, err)
	case errors.Is(err, latch.ErrInvalidCount):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "count", name, fmt.Errorf("count: %w", err))
	case errors.Is(err, latch.ErrInvalidGeneration):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "generation", name, fmt.Errorf("generation: %w", err))
	case errors.Is(err, ErrLatchChanged):
		return apiError(connect.CodeAborted, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
	}
	// The rest as for grants: a name no latch block has is NotFound
	// (REASON_NAME_NOT_CONFIGURED, without the configuration's path),
	// partition failures name "attributes", a lost write reply is Unknown
	// (REASON_OUTCOME_UNKNOWN), the call's end is its own status, someone
	// else's data under the key is FailedPrecondition, the rest
	// Unavailable.
	return grantError(ctx, "latch", name, connect.CodeAborted, err)
}

// latchState is the LatchState of generation gen with count n, written
// at (just before the write was sent) with ttl: expires_at is then the
// daemon's estimate on its own clock, never later than Redis's expiry;
// unset when the latch never expires or no write says when it will.
func latchState(gen string, n int64, at time.Time, ttl time.Duration) *coordhostv1.LatchState {
	st := &coordhostv1.LatchState{Generation: gen, Count: n}
	if ttl > 0 && !at.IsZero() {
		st.ExpiresAt = timestamppb.New(at.Add(ttl).Truncate(time.Millisecond))
	}
	return st
}

// Create serves LatchService.Create.
func (s latchService) Create(ctx context.Context, req *connect.Request[coordhostv1.CreateLatchRequest]) (*connect.Response[coordhostv1.CreateLatchResponse], error) {
	st, err := s.set(ctx, opCreate, req.Msg.GetName(), req.Msg.GetAttributes(), req.Msg.GetCount(), (*latch.Latches).Create)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.CreateLatchResponse{Latch: st}), nil
}

// Reset serves LatchService.Reset.
func (s latchService) Reset(ctx context.Context, req *connect.Request[coordhostv1.ResetLatchRequest]) (*connect.Response[coordhostv1.ResetLatchResponse], error) {
	st, err := s.set(ctx, opReset, req.Msg.GetName(), req.Msg.GetAttributes(), req.Msg.GetCount(), (*latch.Latches).Reset)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.ResetLatchResponse{Latch: st}), nil
}

// set serves Create and Reset.
func (s latchService) set(ctx context.Context, op latchOp, name string, attrs map[string]string, count int64,
	fn func(*latch.Latches, context.Context, string, int64) (*latch.Latch, error)) (*coordhostv1.LatchState, error) {
	if err := checkNameAttributes(name, attrs); err != nil {
		return nil, err
	}
	if err := checkLatchCount(name, count); err != nil {
		return nil, err
	}
	l, err := s.latch(ctx, name)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	got, ttl, err := l.set(ctx, attrs, op, count, fn)
	if err != nil {
		return nil, latchError(ctx, name, err)
	}
	return latchState(got.Generation(), count, at, ttl), nil
}

// Join serves LatchService.Join: the current generation and its count.
// expires_at stays unset: the daemon does not know when the latch last
// changed.
func (s latchService) Join(ctx context.Context, req *connect.Request[coordhostv1.JoinLatchRequest]) (*connect.Response[coordhostv1.JoinLatchResponse], error) {
	m := req.Msg
	name := m.GetName()
	if err := checkNameAttributes(name, m.GetAttributes()); err != nil {
		return nil, err
	}
	l, err := s.latch(ctx, name)
	if err != nil {
		return nil, err
	}
	got, n, err := l.current(ctx, m.GetAttributes())
	if err != nil {
		return nil, latchError(ctx, name, err)
	}
	return connect.NewResponse(&coordhostv1.JoinLatchResponse{Latch: latchState(got.Generation(), n, time.Time{}, 0)}), nil
}

// current returns the current generation of the latch for attrs and its
// count: a Join, then a read of the generation it found, again when
// another replaced it in between (ErrLatchChanged after latchAttempts
// rounds). The answer held at some moment between the two reads.
func (l *Latch) current(ctx context.Context, attrs map[string]string) (*latch.Latch, int64, error) {
	for range latchAttempts {
		got, err := l.Join(ctx, attrs)
		if err != nil {
			return nil, 0, err
		}
		n, err := got.Count(ctx)
		if err != nil {
			return nil, 0, err
		}
		if n >= 0 {
			return got, n, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: latch %q", ErrLatchChanged, l.name)
}

// CountDown serves LatchService.CountDown. A generation that is no longer
// the latch's answers current = false (nothing written); one that had
// completed answers current = true, count 0 (nothing written).
func (s latchService) CountDown(ctx context.Context, req *connect.Request[coordhostv1.CountDownLatchRequest]) (*connect.Response[coordhostv1.CountDownLatchResponse], error) {
	m := req.Msg
	name := m.GetName()
	if err := checkNameAttributes(name, m.GetAttributes()); err != nil {
		return nil, err
	}
	if err := checkGeneration(name, m.GetGeneration(), true); err != nil {
		return nil, err
	}
	l, err := s.latch(ctx, name)
	if err != nil {
		return nil, err
	}
	n, err := l.CountDown(ctx, m.GetAttributes(), m.GetGeneration())
	out := &coordhostv1.CountDownLatchResponse{Current: true, Count: n}
	switch {
	case errors.Is(err, latch.ErrCompleted):
		out.Count = 0
	case err != nil:
		return nil, latchError(ctx, name, err)
	case n < 0:
		out.Current, out.Count = false, 0
	}
	return connect.NewResponse(out), nil
}

// Count serves LatchService.Count: of the generation asked for, or, when
// none is, of the current one (NotFound, REASON_LATCH_NOT_FOUND, when
// there is no latch). A generation whose count reads 0 is looked up
// again to tell whether it is still the latch's.
func (s latchService) Count(ctx context.Context, req *connect.Request[coordhostv1.CountLatchRequest]) (*connect.Response[coordhostv1.CountLatchResponse], error) {
	m := req.Msg
	name, gen := m.GetName(), m.GetGeneration()
	if err := checkNameAttributes(name, m.GetAttributes()); err != nil {
		return nil, err
	}
	if err := checkGeneration(name, gen, false); err != nil {
		return nil, err
	}
	l, err := s.latch(ctx, name)
	if err != nil {
		return nil, err
	}
	if gen == "" {
		_, n, err := l.current(ctx, m.GetAttributes())
		if err != nil {
			return nil, latchError(ctx, name, err)
		}
		return connect.NewResponse(&coordhostv1.CountLatchResponse{Current: true, Count: n}), nil
	}
	n, err := l.Count(ctx, m.GetAttributes(), gen)
	if err != nil {
		return nil, latchError(ctx, name, err)
	}
	out := &coordhostv1.CountLatchResponse{Current: n > 0, Count: n}
	if n == 0 {
		// Complete: current, or replaced after it completed (the latch
		// remembers that); the current generation tells which.
		cur, err := l.Join(ctx, m.GetAttributes())
		switch {
		case errors.Is(err, latch.ErrNotFound):
		case err != nil:
			return nil, latchError(ctx, name, err)
		default:
			out.Current = cur.Generation() == gen
		}
	}
	return connect.NewResponse(out), nil
}

// Delete serves LatchService.Delete (Latch.Delete).
func (s latchService) Delete(ctx context.Context, req *connect.Request[coordhostv1.DeleteLatchRequest]) (*connect.Response[coordhostv1.DeleteLatchResponse], error) {
	m := req.Msg
	name := m.GetName()
	if err := checkNameAttributes(name, m.GetAttributes()); err != nil {
		return nil, err
	}
	if err := checkGeneration(name, m.GetGeneration(), false); err != nil {
		return nil, err
	}
	l, err := s.latch(ctx, name)
	if err != nil {
		return nil, err
	}
	ok, err := l.Delete(ctx, m.GetAttributes(), m.GetGeneration())
	if err != nil {
		return nil, latchError(ctx, name, err)
	}
	return connect.NewResponse(&coordhostv1.DeleteLatchResponse{Deleted: ok}), nil
}

// errLatchWaitDraining ends the Wait streams of a daemon that stops.
func errLatchWaitDraining(name string) error {
	return apiError(connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "", name,
		errors.New("the daemon is shutting down: wait again (at another daemon)"))
}

// Wait serves LatchService.Wait.
//
// It reads the generation's count and sends it at once (or, when the
// generation has already completed or ended, only the last response).
// Then it waits in Latch.Wait, in slices of Options.WaitHeartbeat: when
// a slice runs out with the call still on, it reads the count again and
// sends it (a heartbeat that proxies see, and progress for the client),
// or the last response when that read finds the generation finished,
// and waits again. So the stream runs on the handler's goroutine alone
// (no timer goroutine), at the cost of one read per heartbeat; a wait
// re-entered reads the latch after registering, so nothing that
// happened between two slices is missed. The last response has done =
// true; the stream then ends with OK.
//
// The call's deadline or cancellation ends it (DeadlineExceeded,
// Canceled); so does Host.Drain (Unavailable: wait again elsewhere) and a
// reload that removes the block (NotFound). A wait registers in the
// Host's stream set (h.holds), so a draining daemon ends it at once.
func (s latchService) Wait(ctx context.Context, req *connect.Request[coordhostv1.WaitLatchRequest], stream *connect.ServerStream[coordhostv1.WaitLatchResponse]) error {
	m := req.Msg
	name, gen, attrs := m.GetName(), m.GetGeneration(), m.GetAttributes()
	if err := checkNameAttributes(name, attrs); err != nil {
		return err
	}
	if err := checkGeneration(name, gen, true); err != nil {
		return err
	}
	l, err := s.latch(ctx, name)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	id := "latch-wait/" + randomID(12)
	if !s.h.holds.add(id, nil, cancel) {
		return errLatchWaitDraining(name)
	}
	defer s.h.holds.done(id)

	start := time.Now()
	completed, last, err := l.waitBeating(wctx, attrs, gen, s.h.opts.WaitHeartbeat, func(n int64) error {
		return stream.Send(&coordhostv1.WaitLatchResponse{Count: n})
	})
	if err != nil && wctx.Err() != nil {
		// The call ended (the client's deadline or cancel, or a drain)
		// as a slice ran out or a send failed: the end, not the error
		// that happened to meet it, is why the wait stopped.
		err = wctx.Err()
	}
	l.h.metrics.latch.observeWait(wctx, name, completed, time.Since(start), err)
	switch {
	case err == nil:
		return stream.Send(&coordhostv1.WaitLatchResponse{Count: last, Done: true, Completed: completed})
	case wctx.Err() != nil && ctx.Err() == nil && context.Cause(wctx) == errDraining:
		return errLatchWaitDraining(name)
	}
	var se sendErr
	if errors.As(err, &se) {
		return se.err
	}
	return latchError(ctx, name, err)
}

// sendErr marks an error of the stream's own Send: returned as it is.
type sendErr struct{ err error }

func (e sendErr) Error() string { return e.err.Error() }
func (e sendErr) Unwrap() error { return e.err }

// waitBeating waits for generation of the latch for attrs as Wait does,
// but in slices of every: it first reads the count and calls send with
// it, and again after every slice that runs out while ctx still runs.
// It returns whether the generation completed and the count last read
// (0 when it completed), once it finished. Errors of send come back as
// sendErr. Observed by the caller, once, as one wait.
func (l *Latch) waitBeating(ctx context.Context, attrs map[string]string, gen string, every time.Duration,
	send func(int64) error) (completed bool, last int64, err error) {
	// peek reads the count: finished when the generation completed
	// (count 0) or ended (-1).
	peek := func() (finished bool, err error) {
		n, err := onGeneration(l, ctx, attrs, gen, (*latch.Latch).Count)
		switch {
		case err != nil:
			return false, err
		case n <= 0:
			completed = n == 0
			if completed {
				last = 0
			}
			return true, nil
		}
		last = n
		return false, nil
	}
	if finished, err := peek(); finished || err != nil {
		return completed, last, err
	}
	if err := send(last); err != nil {
		return false, last, sendErr{err}
	}
	for {
		sctx, cancel := context.WithTimeout(ctx, every)
		ok, err := onGeneration(l, sctx, attrs, gen, (*latch.Latch).Wait)
		cancel()
		switch {
		case err == nil:
			if ok {
				last = 0
			}
			return ok, last, nil
		case ctx.Err() != nil || sctx.Err() == nil:
			return false, last, err
		}
		// The slice ran out: a heartbeat with a fresh count (the last one
		// when the read fails: the wait itself rides out Redis errors).
		finished, perr := peek()
		if finished {
			return completed, last, nil
		}
		if perr != nil && ctx.Err() != nil {
			return false, last, perr
		}
		if err := send(last); err != nil {
			return false, last, sendErr{err}
		}
	}
}
