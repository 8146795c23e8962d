package guest

import "unsafe"

// area is the I/O area: a static buffer, so its address never changes.
var area [IOCap]byte

// IOPtr returns the offset of the I/O area in linear memory, for the
// policy_io_ptr export. It is only meaningful in a wasip1 build.
func IOPtr() uint32 { return uint32(uintptr(unsafe.Pointer(&area[0]))) }

// Input returns the first n bytes of the I/O area (clamped to [0, IOCap]).
// The slice aliases the area: it is valid until the next call from the host
// and until Output or Error overwrite it.
func Input(n int32) []byte {
	return area[:min(max(n, 0), IOCap)]
}

// ConfigBytes returns a copy of the n config bytes the host wrote before
// calling policy_configure: the JSON of the HCL `config` object, or nothing
// when the policy has none. Decode them with encoding/json, or use
// LoadConfig.
func ConfigBytes(n int32) []byte {
	return append([]byte(nil), Input(n)...)
}

// LoadConfig parses the n config bytes as a flat JSON object (see
// ParseConfig).
func LoadConfig(n int32) (Config, error) {
	return ParseConfig(Input(n))
}

// Partition decodes the partition_key input of n bytes (see DecodePartition).
func Partition(n int32) (PartitionRequest, error) {
	return DecodePartition(Input(n))
}

// Output writes key at the start of the I/O area and returns the
// partition_key result: its length, or an error result when it does not fit.
func Output(key string) int32 {
	if len(key) > IOCap {
		return Error("partition key longer than the I/O area")
	}
	return int32(copy(area[:], key))
}

// Error writes msg (truncated to IOCap bytes) at the start of the I/O area
// and returns the matching error result for policy_configure or
// partition_key (see ErrorResult).
func Error(msg string) int32 {
	return ErrorResult(copy(area[:], msg))
}
