package policies

// Kind names a kind of policy, as in HCL `policy "KIND" "NAME"`.
type Kind string

// The policy kinds.
const (
	KindRetry      Kind = "retry"
	KindPartition  Kind = "partition"
	KindStarvation Kind = "starvation"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	return k == KindRetry || k == KindPartition || k == KindStarvation
}
