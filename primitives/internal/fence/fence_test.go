package fence

import "testing"

func TestParseClientInfo(t *testing.T) {
	line := "id=42 addr=127.0.0.1:51000 laddr=127.0.0.1:6379 fd=8 name=coordhost-wait age=0 idle=0 flags=N db=0 resp=3\n"
	for _, info := range []string{line, "txt:" + line} {
		got, err := ParseClientInfo(info)
		if err != nil || got != (Identity{ID: 42, Addr: "127.0.0.1:51000", LAddr: "127.0.0.1:6379"}) {
			t.Fatalf("ParseClientInfo(%q) = %+v, %v", info, got, err)
		}
	}
	for _, bad := range []string{"", "addr=1.2.3.4:5", "id=0 addr=x", "id=-3", "id=x"} {
		if got, err := ParseClientInfo(bad); err == nil {
			t.Errorf("ParseClientInfo(%q) = %+v, want an error", bad, got)
		}
	}
}
