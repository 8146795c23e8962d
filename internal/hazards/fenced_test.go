package hazards_test

import (
	"fmt"
	"sync"
)

// fencedStore is a protected resource that checks fencing tokens: it
// accepts a write whose token is at least the highest it has accepted
// (the same holder may write many times) and refuses an older one. It
// remembers the highest token across the Redis hazards, as a real
// resource (a database row, a file's metadata) would.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	writes  []string // accepted, in order
	refused []string
}

// errStale is the refusal of a write with an old token.
type errStale struct{ token, highest int64 }

func (e errStale) Error() string {
	return fmt.Sprintf("fenced resource: token %d is older than %d, write refused", e.token, e.highest)
}

// Write stores what under token, or refuses it.
func (s *fencedStore) Write(token int64, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		s.refused = append(s.refused, what)
		return errStale{token, s.highest}
	}
	s.highest = token
	s.writes = append(s.writes, what)
	return nil
}
