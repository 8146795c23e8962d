package latch_test

import (
	"testing"

	"github.com/coordhost/coordhost/internal/xtest"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(7, &exampleAddr)) }

// exampleAddr is the server the runnable examples talk to.
var exampleAddr string
