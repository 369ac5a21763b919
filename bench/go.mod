// Module bench runs tripswitch's breaker and its Go peers through the same
// workloads in one `go test -bench` run. It is separate so that the main
// module does not depend on the peers.
module github.com/tripswitch-dev/tripswitch/bench

go 1.26.0

require (
	github.com/eapache/go-resiliency v1.7.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0-00010101000000-000000000000
)

require github.com/bits-and-blooms/bitset v1.24.4 // indirect

replace github.com/tripswitch-dev/tripswitch/breaker => ../breaker
