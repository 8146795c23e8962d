package ratelimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

// Rate-limit an HTTP API per client address: a bucket of 2 requests,
// one more every 30 seconds. Every response says where the client
// stands; a refused one says when to come back.
func ExampleNewMiddleware() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	limiters, err := ratelimit.New(client, ratelimit.Options{Prefix: "example:http:"})
	if err != nil {
		panic(err)
	}
	perClient, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(addr string) (*ratelimit.Limiter, error) {
			return limiters.TokenBucket(addr, ratelimit.TokenBucketOptions{
				Limit: 2, TokensPerPeriod: 1, Period: 30 * time.Second,
			})
		},
	})
	if err != nil {
		panic(err)
	}
	defer perClient.Close()

	limit, err := ratelimit.NewMiddleware(perClient, ratelimit.MiddlewareOptions{Name: "api"})
	if err != nil {
		panic(err)
	}
	api := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	}))

	for i := range 3 {
		r := httptest.NewRequest("GET", "/hello", nil) // from 192.0.2.1
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		if i == 0 {
			fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
		}
		fmt.Println(w.Code, "RateLimit:", w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println("    Retry-After:", ra)
		}
	}

	// (Only so that the example can run again at once.)
	client.Do(context.Background(), client.B().Del().Key("example:http:192.0.2.1").Build())
	// Output:
	// RateLimit-Policy: "api";q=2;w=60
	// 200 RateLimit: "api";r=1;t=30
	// 200 RateLimit: "api";r=0;t=30
	// 429 RateLimit: "api";r=0;t=30
	//     Retry-After: 30
}
