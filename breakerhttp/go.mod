// Module breakerhttp puts tripswitch circuits on net/http clients. It needs
// the breaker core, the standard library and golang.org/x/sync, nothing else.
module github.com/tripswitch-dev/tripswitch/breakerhttp

go 1.26.0

require (
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.25.0
)

replace github.com/tripswitch-dev/tripswitch/breaker => ../breaker
