package main

import (
	"testing"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
)

func TestBound(t *testing.T) {
	def, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		s       settings
		writers int32
		want    int64
	}{
		{"default, one writer", def, 1, 200},
		{"default, crowd reached", def, 4, 200},
		{"default, crowd exceeded", def, 5, 0},
		{"reader preference", settings{BoundMS: -1, Crowd: 4}, 1, guest.Unbounded},
		{"reader preference, crowd exceeded", settings{BoundMS: -1, Crowd: 4}, 9, 0},
		{"crowd off", settings{BoundMS: 50}, 1000, 50},
	} {
		if got := bound(tc.s, tc.writers); got != tc.want {
			t.Errorf("%s: bound = %d, want %d", tc.name, got, tc.want)
		}
	}
	s, err := parse([]byte(`{"bound_ms": 0, "crowd": 0}`))
	if err != nil || s != (settings{}) {
		t.Errorf("parse zero config = %+v, %v", s, err)
	}
	if _, err := parse([]byte(`{"crowd": -1}`)); err == nil {
		t.Error("negative crowd accepted")
	}
	if _, err := parse([]byte(`{"bound_ms": "soon"}`)); err == nil {
		t.Error("a string bound_ms accepted")
	}
}
