package handle

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// driftOps renews every time and estimates a renewal for ttl as ttl less
// a tenth (an Estimator, as Redlock's ops are).
type driftOps struct{}

func (driftOps) Describe() string { return "test" }
func (driftOps) Renew(context.Context, rueidis.Client, string, string) (int64, error) {
	return 1, nil
}
func (driftOps) Release(context.Context, rueidis.Client, string) (int64, error) { return 1, nil }
func (driftOps) Owner(context.Context, rueidis.Client) (string, error)          { return "tok", nil }
func (driftOps) Explain(err error) error                                        { return err }
func (driftOps) Estimate(ttl time.Duration) time.Duration                       { return ttl - ttl/10 }

// plainOps is driftOps without Estimate.
type plainOps struct{ driftOps }

func (plainOps) Estimate() {} // not an Estimator: another signature

// A renewal's local estimate is Estimate(ttl) for Ops that implement
// Estimator, ttl for the others.
func TestEstimator(t *testing.T) {
	var c rueidis.Client = fakeClient{}
	var d Handle[driftOps]
	d.Init(c, nil, "k", "tok", driftOps{}, time.Now(), time.Minute)
	if ok, err := d.Renew(context.Background(), time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if r := d.Remaining(); r > 54*time.Minute || r < 53*time.Minute {
		t.Fatalf("Remaining %v after a renewal for 1h with a 10%% allowance", r)
	}
	var p Handle[plainOps]
	p.Init(c, nil, "k", "tok", plainOps{}, time.Now(), time.Minute)
	if ok, err := p.Renew(context.Background(), time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if r := p.Remaining(); r < 59*time.Minute {
		t.Fatalf("Remaining %v after a renewal for 1h without an Estimator", r)
	}
}

// fakeClient is a non-nil rueidis.Client for handles whose Ops never use it.
type fakeClient struct{ rueidis.Client }
