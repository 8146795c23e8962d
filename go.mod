module github.com/coordhost/coordhost

go 1.26.0

require (
	github.com/redis/rueidis v1.0.80
	go.uber.org/goleak v1.3.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
