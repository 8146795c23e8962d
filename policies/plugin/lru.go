package plugin

import (
	"encoding/binary"
	"slices"
	"sync"

	"github.com/coordhost/coordhost/policies"
)

// lru is a bounded least-recently-used map from string to string, safe for
// concurrent use. Lookups take a []byte key and do not allocate.
type lru struct {
	mu   sync.Mutex
	max  int
	m    map[string]*lruNode
	root lruNode // sentinel: root.next is the most recent, root.prev the least
}

type lruNode struct {
	key, val   string
	prev, next *lruNode
}

func newLRU(max int) *lru {
	c := &lru{max: max, m: make(map[string]*lruNode, min(max, 1024))}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

func (c *lru) unlink(n *lruNode) {
	n.prev.next, n.next.prev = n.next, n.prev
}

func (c *lru) pushFront(n *lruNode) {
	n.prev, n.next = &c.root, c.root.next
	c.root.next.prev = n
	c.root.next = n
}

// get returns the value stored under key and marks it most recent.
func (c *lru) get(key []byte) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[string(key)]
	if !ok {
		return "", false
	}
	if c.root.next != n {
		c.unlink(n)
		c.pushFront(n)
	}
	return n.val, true
}

// add stores val under key as the most recent entry, evicting the least
// recent one when full.
func (c *lru) add(key []byte, val string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.m[string(key)]; ok {
		n.val = val
		if c.root.next != n {
			c.unlink(n)
			c.pushFront(n)
		}
		return
	}
	var n *lruNode
	if len(c.m) >= c.max {
		// Reuse the least recent node.
		n = c.root.prev
		c.unlink(n)
		delete(c.m, n.key)
	} else {
		n = new(lruNode)
	}
	n.key, n.val = string(key), val
	c.m[n.key] = n
	c.pushFront(n)
}

func (c *lru) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// clear drops every entry.
func (c *lru) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.root.next, c.root.prev = &c.root, &c.root
}

// appendPartitionKey appends an unambiguous encoding of r to b: every string
// length-prefixed, attributes sorted by name.
func appendPartitionKey(b []byte, r policies.PartitionRequest) []byte {
	str := func(b []byte, s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	b = str(b, r.Kind)
	b = str(b, r.Name)
	b = binary.AppendUvarint(b, uint64(len(r.Attributes)))
	var arr [8]string
	names := arr[:0]
	for k := range r.Attributes {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = str(b, k)
		b = str(b, r.Attributes[k])
	}
	return b
}
