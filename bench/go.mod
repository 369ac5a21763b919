// Module bench runs tripswitch's breaker and its Go peers through the same
// workloads in one `go test -bench` run. It is separate so that the main
// module does not depend on the peers.
module github.com/tripswitch-dev/tripswitch/bench

go 1.26.0

require (
	github.com/eapache/go-resiliency v1.7.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0
	github.com/tripswitch-dev/tripswitch/breakerhttp v0.0.0
	github.com/tripswitch-dev/tripswitch/limit v0.0.0
	golang.org/x/sync v0.25.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
)

replace (
	github.com/tripswitch-dev/tripswitch/breaker => ../breaker
	github.com/tripswitch-dev/tripswitch/breakerhttp => ../breakerhttp
	github.com/tripswitch-dev/tripswitch/limit => ../limit
)
