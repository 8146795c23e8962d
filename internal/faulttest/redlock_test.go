package faulttest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
)

// Overlaps flags holds whose intervals intersect, and only those.
func TestOverlaps(t *testing.T) {
	h := func(client int, from, to int) faulttest.Hold {
		return faulttest.Hold{Client: client, Token: string(rune('a' + client)), From: ms * time.Duration(from), To: ms * time.Duration(to)}
	}
	cases := []struct {
		name  string
		holds []faulttest.Hold
		want  int
	}{
		{"none", nil, 0},
		{"disjoint", []faulttest.Hold{h(0, 0, 10), h(1, 20, 30), h(2, 40, 50)}, 0},
		{"touching", []faulttest.Hold{h(0, 0, 10), h(1, 10, 20)}, 0},
		{"overlap", []faulttest.Hold{h(0, 0, 10), h(1, 9, 20)}, 1},
		{"nested", []faulttest.Hold{h(0, 0, 100), h(1, 10, 20), h(2, 30, 40)}, 2},
		{"out of order", []faulttest.Hold{h(1, 9, 20), h(0, 0, 10)}, 1},
		{"empty hold", []faulttest.Hold{h(0, 0, 10), h(1, 5, 5)}, 0},
	}
	for _, tc := range cases {
		got := faulttest.Overlaps(tc.holds)
		if len(got) != tc.want {
			t.Errorf("%s: %d overlaps %v, want %d", tc.name, len(got), got, tc.want)
		}
	}
	if o := faulttest.Overlaps([]faulttest.Hold{h(0, 0, 10), h(1, 9, 20)})[0]; o.From != 9*ms || o.To != 10*ms || o.String() == "" {
		t.Errorf("overlap %+v", o)
	}
}

// Holds records from many goroutines.
func TestHoldsConcurrent(t *testing.T) {
	hs := faulttest.NewHolds()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				hs.Op()
				from := hs.Now()
				hs.Add(faulttest.Hold{Client: i, From: from, To: from, Renewals: j})
			}
		}()
	}
	wg.Wait()
	if hs.Ops() != 800 || len(hs.All()) != 800 {
		t.Fatalf("%d ops, %d holds", hs.Ops(), len(hs.All()))
	}
	all := hs.All()
	for i := 1; i < len(all); i++ {
		if all[i].From < all[i-1].From {
			t.Fatal("All not ordered by From")
		}
	}
}
