// Module breakerhttp puts tripswitch circuits and limits on net/http clients
// and servers. It needs the breaker and limit modules and the standard
// library, nothing else.
module github.com/tripswitch-dev/tripswitch/breakerhttp

go 1.26.0

require (
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0
	github.com/tripswitch-dev/tripswitch/limit v0.0.0
	go.uber.org/goleak v1.3.0
)

replace (
	github.com/tripswitch-dev/tripswitch/breaker => ../breaker
	github.com/tripswitch-dev/tripswitch/limit => ../limit
)
