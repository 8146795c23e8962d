package builtin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

func TestTemplate(t *testing.T) {
	tp, err := ParseTemplate("{${tenant}}:${name}:${kind}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.PartitionKey(context.Background(), policies.PartitionRequest{Kind: "lock", Name: "invoice", Attributes: map[string]string{"tenant": "acme"}})
	if err != nil || got != "{acme}:invoice:lock" {
		t.Fatalf("got %q, %v", got, err)
	}
	if a := tp.Attributes(); len(a) != 1 || a[0] != "tenant" {
		t.Fatalf("attributes %v", a)
	}
	if _, err := tp.PartitionKey(context.Background(), policies.PartitionRequest{Name: "x", Kind: "lock"}); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("missing attribute: %v", err)
	}
}

func TestTemplateRejects(t *testing.T) {
	for _, src := range []string{"", "${", "a${tenant", "${}", "${ten ant}", "${a/b}"} {
		if _, err := ParseTemplate(src); err == nil {
			t.Errorf("ParseTemplate(%q) accepted", src)
		}
	}
	if tp, err := ParseTemplate("static"); err != nil || tp.String() != "static" {
		t.Fatal(tp, err)
	}
}

func TestWriterPreference(t *testing.T) {
	if (WriterPreference{Bound: -1}).Validate() == nil {
		t.Fatal("negative bound accepted")
	}
	if b := (WriterPreference{Bound: time.Second}).WriterBound(context.Background(), policies.StarvationRequest{}); b != time.Second {
		t.Fatal(b)
	}
}
