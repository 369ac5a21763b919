// Module accessgate is tripswitch's fail-closed permission gate.
module github.com/tripswitch-dev/tripswitch/accessgate

go 1.26.0

require (
	github.com/maypok86/otter/v2 v2.4.0
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0
	github.com/tripswitch-dev/tripswitch/breakerhttp v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.25.0
)

require github.com/tripswitch-dev/tripswitch/limit v0.0.0 // indirect

replace (
	github.com/tripswitch-dev/tripswitch/breaker => ../breaker
	github.com/tripswitch-dev/tripswitch/breakerhttp => ../breakerhttp
	github.com/tripswitch-dev/tripswitch/limit => ../limit
)
